"""The shared loop's workload for ``algorithm=dynamics``: trajectory windows in, k-step error out.

Training batches are a pure function of (seed, step) - windows drawn
uniformly with a generator seeded by both - so resume and rollback repeat
exactly; under ``torchrun`` each rank trains on its share of the global batch.
``hardware.loader=memory`` gathers them from tensors that live on the device
when they fit (``hardware.data_on_device``); ``hardware.loader=pyg`` hands the
same gathers to a torch ``DataLoader`` with the preset's workers, prefetch,
persistent workers and pinned memory. Validation scores every
window of the validation split (stride ``window - burn_in``: each row once)
and best.pt minimises ``val/k_step_rmse``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Sampler

from uavgnn.dynamics.filters import KinematicFilter
from uavgnn.dynamics.kinematics import Estimate, constant_velocity, dynamics_metrics, estimate, rmses
from uavgnn.dynamics.rollouts import RolloutSource, load_rollouts, rollout_key
from uavgnn.dynamics.tuning import TuningSettings, tuned_filter
from uavgnn.dynamics.windows import TrajectoryWindows, Units, WindowBatch, feature_stats
from uavgnn.envs.policies import Policy
from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.device import Loading, autocast, eval_mode, keep_on_device
from uavgnn.infrastructure.randomness import stream

EVAL_BATCH = 1024  # windows per validation forward
Estimator = Callable[[WindowBatch], Estimate]  # the TCN or a baseline on a batch of windows


class StepSampler(Sampler):
    """Window ids of steps ``start``, ``start + 1``, ...: each a pure function of (seed, step); under
    ``torchrun`` each rank takes its share of the step's global batch."""

    def __init__(self, n: int, batch_size: int, seed: int, start: int) -> None:
        self.n, self.batch_size, self.seed, self.start = n, batch_size, seed, start
        ctx = distributed.context()
        self.rank, self.world_size = ctx.rank, ctx.world_size

    def ids(self, step: int) -> torch.Tensor:
        generator = stream(self.seed, "windows", step)  # the global batch: every rank draws it, takes its share
        return torch.randint(self.n, (self.batch_size,), generator=generator)[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[list[int]]:
        step = self.start
        while True:
            yield self.ids(step).tolist()
            step += 1


def _as_is(batch: WindowBatch) -> WindowBatch:
    return batch


@dataclass(frozen=True)
class WindowSettings:
    """The windows a model reads: ``window`` rows, the first ``burn_in`` not scored, ``predict_steps`` ahead."""

    window: int = 32
    burn_in: int = 8
    predict_steps: int = 5


class TrajectoryWorkload:
    """Windows of the cached rollouts (``uavgnn.dynamics.rollouts``) for the TCN."""

    unit = "samples"

    def __init__(
        self,
        source: RolloutSource,
        windows: WindowSettings,
        seed: int,
        loading: Loading,
        device: torch.device,
        rollout_policy: tuple[Policy, str],
    ) -> None:
        """``rollout_policy``: who flies the rollouts, and its name in their cache key."""
        self.source, self.seed, self.loading, self.device = source, seed, loading, device
        self.rollout_policy = rollout_policy
        self.window, self.burn_in, self.predict_steps = windows.window, windows.burn_in, windows.predict_steps
        self.settings = source.settings
        self.units = Units.of(self.settings, source.dist.side(self.settings.n_uav))
        self.sizes = [self.settings.n_uav]
        train = self.load("train")
        self.stats = feature_stats(train, self.units)  # the training split's normalisation, for every split
        self.train = TrajectoryWindows(train, self.stats, self.units, self.window + self.predict_steps)
        self.val = self.windows("val")
        if keep_on_device(loading.data_on_device, device, self.train.nbytes() + self.val.nbytes()):
            if loading.loader == "memory":  # a DataLoader's workers gather on the host and pin for the copy
                self.train.to(device)
            self.val.to(device)
        self._batches: Iterator[WindowBatch] | None = None

    def windows(self, split: str) -> TrajectoryWindows:
        """A scoring split's windows (each row once), normalised with the training statistics."""
        return TrajectoryWindows(
            self.load(split),
            self.stats,
            self.units,
            self.window + self.predict_steps,
            stride=self.window - self.burn_in,
        )

    def load(self, split: str) -> dict[str, Any]:
        """A split's raw trajectories (``uavgnn.dynamics.rollouts``), from the cache."""
        return load_rollouts(self.source, split, *self.rollout_policy)

    # -- the loop's interface -----------------------------------------------------------------------------------

    def probe_store(self) -> TrajectoryWindows:
        return self.train

    def collect(self, step: int) -> None:
        """A dataset: nothing to collect."""

    def host_batches(self, start: int, batch_size: int) -> Iterator[WindowBatch]:
        """The batches of steps ``start``, ``start + 1``, ... before their copy to the device: gathered in
        memory, or by a torch DataLoader with the hardware preset's knobs (``hardware.loader=pyg``)."""
        sampler = StepSampler(len(self.train), batch_size, self.seed, start)
        if self.loading.loader == "memory":
            return (self.train.gather(sampler.ids(step)) for step in itertools.count(start))
        hw = self.loading
        return iter(
            DataLoader(
                self.train,
                batch_sampler=sampler,
                collate_fn=_as_is,
                num_workers=hw.num_workers,
                pin_memory=hw.pin_memory and self.device.type == "cuda",
                prefetch_factor=hw.prefetch_factor if hw.num_workers else None,
                persistent_workers=hw.persistent_workers and hw.num_workers > 0,
            )
        )

    def restart(self, step: int, batch_size: int) -> None:
        self._batches = self.host_batches(step, batch_size)

    def batch(self, step: int, stage: int, batch_size: int) -> WindowBatch:
        """The step's batch (the trainer calls ``restart`` first, and again after a rollback or a new size)."""
        return next(self._batches).to(self.device, non_blocking=True)

    def items(self, batch: WindowBatch) -> int:
        return len(batch)

    def feedback(self, batch: WindowBatch, values: torch.Tensor | None) -> None:
        """Nothing to feed back."""

    def window_stats(self) -> dict[str, float]:
        return {}

    def validate(self, policy: nn.Module, stage: int, dtype: torch.dtype | None) -> dict[str, float]:
        with eval_mode(policy):
            scores = self.score(
                {"tcn": self.estimator(policy, dtype), "constant_velocity": self.constant_velocity}, self.val
            )
        return {
            f"val/{prefix}{key}": value
            for name, prefix in (("tcn", ""), ("constant_velocity", "cv_"))
            for key, value in scores[name].items()
            if isinstance(value, float)
        }

    def estimator(self, model: nn.Module, dtype: torch.dtype | None = None) -> Estimator:
        """The model (the TCN, the learned filter) as an estimator (the caller puts it in eval mode)."""

        def run(batch: WindowBatch) -> Estimate:
            with autocast(self.device, dtype):
                return estimate(model, batch, self.window, self.predict_steps)

        return run

    def tuned(self, flt: KinematicFilter, name: str, settings: TuningSettings) -> KinematicFilter:
        """``flt`` with its settings fitted on the training windows with the TCN's data loss, kept as they were
        at their best on the validation windows (``uavgnn.dynamics.tuning``; cached, named ``name``)."""
        policy_id = self.rollout_policy[1]
        identity = {
            "filter": name,
            **{
                split: rollout_key(self.source.specs[split], self.settings, self.source.dist, policy_id)
                for split in ("train", "val")
            },
        }
        return tuned_filter(
            flt.to(self.device),
            lambda: (self.train, self.val),
            self.burn_in,
            settings,
            self.seed,
            (Path(self.source.cache_dir), identity),
        )

    def constant_velocity(self, batch: WindowBatch) -> Estimate:
        return constant_velocity(batch, self.window, self.predict_steps)

    @torch.no_grad()
    def score(self, estimators: dict[str, Estimator], windows: TrajectoryWindows) -> dict[str, dict[str, Any]]:
        """RMSEs (world units, ``rmses``) of every estimator on every window of a split, side by side on the
        same batches."""
        sums: dict[str, dict[str, torch.Tensor]] = {name: {} for name in estimators}
        for ids in torch.arange(len(windows)).split(EVAL_BATCH):
            batch = windows.gather(ids).to(self.device)
            for name, run in estimators.items():
                metrics = dynamics_metrics(run(batch), batch, self.units, self.window, self.burn_in)
                for key, value in metrics.items():
                    sums[name][key] = sums[name].get(key, 0.0) + value
        return {name: rmses(total) for name, total in sums.items()}

    def describe(self, val: dict[str, float], stage: int, best: float) -> str:
        return (
            f"val k-step error {val['val/k_step_rmse']:.4f} (best {best:.4f}; constant velocity "
            f"{val['val/cv_k_step_rmse']:.4f}), velocity {val['val/velocity_rmse']:.4f}, "
            f"disturbance {val['val/disturbance_rmse']:.4f}"
        )

    def checkpoint_extras(self) -> dict[str, Any]:
        return {"feature_stats": list(self.stats)}

    def state_dict(self) -> dict[str, Any]:
        return {}  # batches are a pure function of (seed, step)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore (see ``state_dict``)."""
