"""The trained dynamics model against its baselines (``uavgnn.dynamics.filters``, constant velocity) on the
test splits, and what its pictures show (``uavgnn.reporting.dynamics_pictures`` draws them).

``test`` has the training distribution of disturbances, ``test_ood`` wind and
drag ``algorithm.ood_scale`` times stronger. Errors are RMSEs in world units
over every scored row (``TrajectoryWorkload.score``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from uavgnn.dynamics.filters import baseline_filters
from uavgnn.dynamics.kinematics import on_wall
from uavgnn.dynamics.workload import Estimator, TrajectoryWorkload
from uavgnn.infrastructure.device import eval_mode
from uavgnn.reporting.dynamics_pictures import Predictions

TEST_SPLITS = ("test", "test_ood")


def scoring_methods(model: nn.Module, work: TrajectoryWorkload) -> dict[str, Estimator]:
    """The TCN and its baselines, in the order of the test table (the filters calibrated on the training split)."""
    filters = baseline_filters(work.load("train"), work.units, work.settings, work.window, work.predict_steps)
    return {"tcn": work.tcn(model), **filters, "constant_velocity": work.constant_velocity}


def compare_on_test(
    model: nn.Module, work: TrajectoryWorkload, estimators: dict[str, Estimator]
) -> list[dict[str, Any]]:
    """One row per split and method (``scoring_methods``), all scored on the same windows;
    ``vs_constant_velocity``: the share of the constant-velocity k-step error a method removes. Methods without
    a disturbance estimate (kinematics, constant velocity) score its zero."""
    rows: list[dict[str, Any]] = []
    with eval_mode(model):
        for split in TEST_SPLITS:
            scores = work.score(estimators, work.windows(split))
            cv = scores["constant_velocity"]["k_step_rmse"]
            rows += [
                {"split": split, "method": name, **s, "vs_constant_velocity": 1.0 - s["k_step_rmse"] / cv}
                for name, s in scores.items()
            ]
    return rows


@torch.no_grad()
def predictions(
    model: nn.Module, work: TrajectoryWorkload, methods: dict[str, Estimator], split: str, windows: int = 3
) -> Predictions:
    """The TCN's, the Kalman filter's and constant velocity's predictions on ``windows`` windows of ``split``,
    evenly spread, the last the one the wall stops most."""
    units, w, b, k = work.units, work.window, work.burn_in, work.predict_steps
    data = work.windows(split)
    everything = data.gather(torch.arange(len(data)))
    wall_rows = on_wall(everything.pos[:, b + 1 : w + 1], units).sum(1)
    spread = ((torch.arange(windows - 1) + 0.5) * len(data) / windows).long()  # evenly inside the split
    ids = torch.cat([spread, wall_rows.argmax().view(1)])
    batch = data.gather(ids).to(work.device)
    with eval_mode(model):
        est = {name: methods[name](batch) for name in ("tcn", "kalman", "constant_velocity")}
    return Predictions(
        split,
        ids.tolist(),
        b,
        k,
        batch.pos[:, : w + k].cpu() * units.position,
        batch.pos_obs[:, : w + k].cpu() * units.position,
        {name: (batch.pos_obs[:, b:w] + e.ahead[:, b:, -1]).cpu() * units.position for name, e in est.items()},
        batch.disturbance[:, :w].cpu() * units.accel,
        {name: est[name].disturbance.cpu() * units.accel for name in ("tcn", "kalman")},
        on_wall(batch.pos[:, 1 : w + 1], units).cpu(),
    )
