"""Filters tuned like the network: a filter's noise, priors and command gains fitted by gradient descent on the
training split's windows with the TCN's own data loss (``data_loss``: every horizon ahead and the measured
velocity, observed quantities only), the settings kept those of the step with the lowest loss on the validation
split, the data-estimated start included (Greenberg, Yannay and Mannor, "Optimization or Architecture: How to
Hack Kalman Filtering", NeurIPS 2023: untuned filters make weak baselines).

A loss on the estimates fixes only the ratios of the noise settings (the gains depend on nothing else), not
their scale, which is what the filter's covariance - and its NEES - reads. So the kept settings are then scaled
together until the filter's innovations on the validation split have the spread its covariance predicts (a mean
normalised innovation squared of 2): observed quantities only, the estimates unchanged.

The fitted settings are cached like the rollouts (content-hashed key: the two splits' keys, the windows, the
tuning settings, the seed), so a run's test phase and ``mode=eval`` of its checkpoint fit each filter once.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from uavgnn.data.cache import key_hash, load_or_build_payload
from uavgnn.dynamics.filters import KinematicFilter
from uavgnn.dynamics.kinematics import data_loss
from uavgnn.dynamics.windows import TrajectoryWindows
from uavgnn.infrastructure.randomness import stream

FORMAT_VERSION = 2  # 2: the process noise keeps its floor
EVAL_BATCH = 1024  # windows per validation forward


@dataclass(frozen=True)
class TuningSettings:
    """Adam on ``batch_size`` training windows a step for ``steps`` steps, the validation loss every
    ``validate_every``."""

    steps: int = 150
    batch_size: int = 512
    lr: float = 0.01
    validate_every: int = 15


@torch.no_grad()
def mean_data_loss(flt: KinematicFilter, windows: TrajectoryWindows, burn_in: int) -> float:
    """``data_loss`` over every window of a split (means of equal-sized batches weighed by their size)."""
    total, count = 0.0, 0
    for ids in torch.arange(len(windows)).split(EVAL_BATCH):
        batch = windows.gather(ids).to(flt.prior_mean.device)
        total += float(data_loss(flt(batch).rows(burn_in), batch, flt.window, burn_in)) * len(ids)
        count += len(ids)
    return total / count


def tune(
    flt: KinematicFilter,
    train: TrajectoryWindows,
    val: TrajectoryWindows,
    burn_in: int,
    settings: TuningSettings,
    seed: int,
) -> list[dict[str, float]]:
    """Fit ``flt``'s settings in place (then scaled by ``innovation_scale``); returns the history (step, training
    and validation loss). Batches are a pure function of (seed, step)."""
    optimizer = torch.optim.Adam(flt.parameters(), lr=settings.lr)
    history: list[dict[str, float]] = []
    best, kept = float("inf"), {k: v.clone() for k, v in flt.state_dict().items()}
    loss = torch.full((), float("nan"))
    for step in range(settings.steps + 1):
        if step % settings.validate_every == 0 or step == settings.steps:
            val_loss = mean_data_loss(flt, val, burn_in)
            history.append({"step": step, "train_loss": float(loss.detach()), "val_loss": val_loss})
            if val_loss < best:
                best, kept = val_loss, {k: v.clone() for k, v in flt.state_dict().items()}
        if step == settings.steps:
            break
        ids = torch.randint(len(train), (settings.batch_size,), generator=stream(seed, "filter_tuning", step))
        batch = train.gather(ids).to(flt.prior_mean.device)
        loss = data_loss(flt(batch).rows(burn_in), batch, flt.window, burn_in)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    flt.load_state_dict(kept)
    flt.scale_noise(innovation_scale(flt, val, burn_in))
    return history


@torch.no_grad()
def innovation_scale(flt: KinematicFilter, windows: TrajectoryWindows, burn_in: int) -> float:
    """The factor of every noise setting that brings the filter's mean normalised innovation squared on a split's
    rows to 2 (the measurement's dimension): its estimates stay, its covariances take the scale of its errors."""
    total, count = 0.0, 0
    for ids in torch.arange(len(windows)).split(EVAL_BATCH):
        nis = flt.filtered(windows.gather(ids).to(flt.prior_mean.device))[2][:, burn_in:]
        total, count = total + float(nis.sum()), count + nis.numel()
    return total / count / 2


def tuned_filter(
    flt: KinematicFilter,
    splits: Callable[[], tuple[TrajectoryWindows, TrajectoryWindows]],
    burn_in: int,
    settings: TuningSettings,
    seed: int,
    cache: tuple[Path, dict[str, Any]],
) -> KinematicFilter:
    """``flt`` with its settings fitted (``tune``) or read from the cache: ``cache`` is (the cache directory,
    what identifies the data and the start: the splits' keys, the filter's name); ``splits`` gives the
    training and validation windows when they are needed."""
    directory, identity = cache
    key = {
        "format_version": FORMAT_VERSION,
        "kind": "tuned_filter",
        **identity,
        "window": flt.window,
        "burn_in": burn_in,
        "predict_steps": flt.predict_steps,
        "tuning": dataclasses.asdict(settings),
        "seed": seed,
    }

    def build() -> tuple[dict[str, Any], dict, int, int]:
        start = time.perf_counter()
        history = tune(flt, *splits(), burn_in, settings, seed)
        payload = {key: value.detach().cpu() for key, value in flt.state_dict().items()}  # readable on any machine
        payload["val_loss"] = torch.tensor([h["val_loss"] for h in history], dtype=torch.float64)
        return payload, {"timings": {"tune_s": time.perf_counter() - start}}, 1, 0  # one set of settings, no scene

    name = identity.get("filter", "filter")
    payload = load_or_build_payload(
        directory / f"tuned-{name}-{key_hash(key)}", key, build, f"{settings.steps} steps of gradient descent"
    )
    flt.load_state_dict({name: payload[name] for name in flt.state_dict()})
    return flt
