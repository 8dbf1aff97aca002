"""Training windows of the trajectory datasets, normalised once when the dataset is built.

A window is ``window + predict_steps`` consecutive rows of one UAV inside one
episode: the model reads rows 0..window-1 and is scored at rows
burn_in..window-1, each against the ``predict_steps`` rows after it.

``TrajectoryWindows`` computes the input features of every row of a split at
once - observed displacement since the last row, observed position, command -
normalises them with the training split's mean and std, converts the labels to
the model's units (``Units``) and keeps it all as one table of rows (on the
device when it fits); a batch is one gather. ``NaiveWindows`` is reference/004's slow
pipeline for the benchmark and the equivalence test: raw arrays, features and
normalisation per sample in ``__getitem__``, default collation.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from uavgnn.envs.settings import EnvSettings

N_FEATURES = 6  # observed displacement (2), observed position / side (2), commanded acceleration (2)
TARGETS = ("pos_obs", "pos", "vel_obs", "vel", "accel", "disturbance")  # per row, in model units


@dataclass(frozen=True)
class Units:
    """The model's units: one max-speed step of distance, max speed, max acceleration. In them the
    kinematics read v' = v + accel_ratio (a + d) and p' = p + v', inside the arena [0, side]^2."""

    position: float
    velocity: float
    accel: float
    dt: float
    side: float  # the arena's side, in position units (its wall stops a UAV: ``kinematic_step``)

    @classmethod
    def of(cls, settings: EnvSettings, side: float) -> Units:
        """``side``: the arena's side in world units (``SceneDistribution.side``)."""
        position = settings.max_speed * settings.dt
        return cls(position, settings.max_speed, settings.max_accel, settings.dt, side / position)

    def of_target(self, name: str) -> float:
        """The unit of a recorded quantity (``TARGETS``)."""
        return {"pos": self.position, "vel": self.velocity}.get(name.removesuffix("_obs"), self.accel)

    @property
    def accel_ratio(self) -> float:
        return self.accel * self.dt / self.velocity


@dataclass
class WindowBatch:
    """B windows of L rows: ``x`` (B, L, N_FEATURES) normalised inputs; the rest (B, L, 2) in model units."""

    x: torch.Tensor
    pos_obs: torch.Tensor
    pos: torch.Tensor
    vel_obs: torch.Tensor
    vel: torch.Tensor
    accel: torch.Tensor
    disturbance: torch.Tensor

    def __len__(self) -> int:
        return self.x.shape[0]

    def to(self, device: torch.device, non_blocking: bool = False) -> WindowBatch:
        return WindowBatch(*(getattr(self, f.name).to(device, non_blocking=non_blocking) for f in fields(self)))

    def pin_memory(self) -> WindowBatch:
        return WindowBatch(*(getattr(self, f.name).pin_memory() for f in fields(self)))


def row_features(
    pos_obs: torch.Tensor, accel: torch.Tensor, episode: torch.Tensor, side: float, units: Units
) -> torch.Tensor:
    """(S, T, N_FEATURES) raw features of every row; the displacement is zero on an episode's first row."""
    step = torch.zeros_like(pos_obs)
    same = (episode[:, 1:] == episode[:, :-1])[..., None]
    step[:, 1:] = (pos_obs[:, 1:] - pos_obs[:, :-1]) * same / units.position
    return torch.cat([step, pos_obs / side, accel / units.accel], -1)


def feature_stats(payload: dict[str, Any], units: Units) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std of every feature over the training split: the normalisation every split uses."""
    x = row_features(payload["pos_obs"], payload["accel"], payload["episode"], float(payload["side"]), units)
    flat = x.reshape(-1, N_FEATURES)
    return flat.mean(0), flat.std(0).clamp(min=1e-6)


def window_starts(episode: torch.Tensor, length: int, stride: int = 1) -> torch.Tensor:
    """(W, 2) (sequence, first row) of every window of ``length`` rows inside one episode, every ``stride`` rows."""
    first = torch.arange(0, episode.shape[1] - length + 1, stride)
    inside = episode[:, first] == episode[:, first + length - 1]
    seq, col = inside.nonzero(as_tuple=True)
    return torch.stack([seq, first[col]], 1)


class TrajectoryWindows:
    """A split as one table of rows, normalised once; ``gather(ids)`` is a batch (one ``index_select``)."""

    def __init__(
        self,
        payload: dict[str, Any],
        stats: tuple[torch.Tensor, torch.Tensor],
        units: Units,
        length: int,
        stride: int = 1,
    ) -> None:
        mean, std = stats
        x = (
            row_features(payload["pos_obs"], payload["accel"], payload["episode"], float(payload["side"]), units) - mean
        ) / std
        self.length, self.rows = length, x.shape[1]
        # (S x T, 6 + 2 x 6): the inputs and every label of a row side by side, so a batch is one gather
        self.table = torch.cat([x, *(payload[name] / units.of_target(name) for name in TARGETS)], -1).flatten(0, 1)
        seq, first = window_starts(payload["episode"], length, stride).unbind(1)
        self.first_rows = seq * self.rows + first  # each window's first row in the table
        self.offsets = torch.arange(length)  # its rows after that one

    def __len__(self) -> int:
        return self.first_rows.shape[0]

    def to(self, device: torch.device) -> TrajectoryWindows:
        self.table, self.first_rows, self.offsets = (t.to(device) for t in (self.table, self.first_rows, self.offsets))
        return self

    def nbytes(self) -> int:
        return self.table.numel() * self.table.element_size()

    def gather(self, ids: torch.Tensor) -> WindowBatch:
        """The windows ``ids`` as a batch: one ``index_select`` of their flat rows (on the CPU ~50x faster
        than advanced indexing with (sequence, row) pairs), split into views."""
        flat = (self.first_rows[ids.to(self.first_rows.device), None] + self.offsets).view(-1)
        rows = self.table.index_select(0, flat).view(len(ids), self.length, -1)
        return WindowBatch(*rows.split([N_FEATURES] + [2] * len(TARGETS), -1))

    def __getitems__(self, ids: list[int]) -> WindowBatch:  # torch DataLoader's batched fetch (hardware.loader=pyg)
        return self.gather(torch.as_tensor(ids))


class NaiveWindows(Dataset):
    """reference/004's slow pipeline: numpy arrays, each sample's features and normalisation in ``__getitem__``."""

    def __init__(
        self, payload: dict[str, Any], stats: tuple[torch.Tensor, torch.Tensor], units: Units, length: int
    ) -> None:
        self.arrays = {name: payload[name].numpy() for name in (*TARGETS, "episode")}
        self.mean, self.std = stats[0].numpy(), stats[1].numpy()
        self.side, self.units, self.length = float(payload["side"]), units, length
        self.starts = window_starts(payload["episode"], length).numpy()

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        s, start = self.starts[i]
        a, u = self.arrays, self.units
        rows = slice(start, start + self.length)
        pos_obs = a["pos_obs"][s, rows]
        before = (
            a["pos_obs"][s, start - 1]
            if start > 0 and a["episode"][s, start - 1] == a["episode"][s, start]
            else pos_obs[0]
        )
        step = np.diff(pos_obs, axis=0, prepend=before[None]) / u.position
        x = np.concatenate([step, pos_obs / self.side, a["accel"][s, rows] / u.accel], 1)
        x = (x - self.mean) / self.std  # the per-sample scaler.transform of the guide
        return {"x": torch.FloatTensor(x), **{n: torch.FloatTensor(a[n][s, rows] / u.of_target(n)) for n in TARGETS}}


def collate_naive(samples: list[dict[str, torch.Tensor]]) -> WindowBatch:
    """Default collation of ``NaiveWindows`` samples into a batch."""
    return WindowBatch(*(torch.stack([sample[name] for sample in samples]) for name in ("x", *TARGETS)))
