"""The trained dynamics model against its baselines (``uavgnn.dynamics.filters``, constant velocity) on the
test splits, and what its pictures show (``uavgnn.reporting.dynamics_pictures`` draws them).

The baselines: the extended Kalman filter with wind and drag in its state (``ekf``) and the known-kinematics
filter (``kf``), each with its settings estimated from the training split (``_estimated``) and fitted by
gradient descent on the TCN's loss (``_tuned``, ``uavgnn.dynamics.tuning``), and constant velocity. ``test``
has the training distribution of disturbances, ``test_ood`` wind and drag ``algorithm.ood_scale`` times
stronger. Errors are RMSEs in world units over every scored row (``TrajectoryWorkload.score``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from uavgnn.dynamics.filters import KinematicFilter, baseline_filters
from uavgnn.dynamics.kinematics import on_wall
from uavgnn.dynamics.learned_filter import LearnedFilter
from uavgnn.dynamics.tuning import TuningSettings, mean_data_loss
from uavgnn.dynamics.workload import Estimator, TrajectoryWorkload
from uavgnn.infrastructure.device import eval_mode
from uavgnn.reporting.dynamics_pictures import Predictions, plot_predictions, plot_steps_ahead
from uavgnn.reporting.tables import format_table
from uavgnn.runs.layout import PREDICTIONS_PICTURE, STEPS_AHEAD_PICTURE

TEST_SPLITS = ("test", "test_ood")
# the test table's columns: the error at every horizon, the hidden state's, the filters' consistency
COLUMNS = ("split", "method", "velocity_rmse", "disturbance_rmse", "nees", "nees_in_95")
WALL_COLUMNS = (
    "split",
    "method",
    "disturbance_edge_rmse",
    "disturbance_interior_rmse",
    "physics_rmse",
    "pred_rmse",
    "vs_constant_velocity",
)


def model_name(model: nn.Module) -> str:
    """The model's row in the tables: ``learned_filter`` or ``tcn``."""
    return "learned_filter" if isinstance(model, LearnedFilter) else "tcn"


def filters(work: TrajectoryWorkload, tuning: TuningSettings) -> dict[str, KinematicFilter]:
    """The filters in the order of the test table: each with its settings estimated on the training split, then
    tuned from them."""
    estimated = baseline_filters(work.load("train"), work.units, work.settings, work.window, work.predict_steps)
    out: dict[str, KinematicFilter] = {}
    for name, flt in estimated.items():
        out[f"{name}_tuned"] = work.tuned(copy.deepcopy(flt), name, tuning)
        out[f"{name}_estimated"] = flt.to(work.device)
    return out


def scoring_methods(
    model: nn.Module, work: TrajectoryWorkload, baselines: dict[str, Estimator]
) -> dict[str, Estimator]:
    """The model, the filters (``filters``) and constant velocity, in the order of the test table."""
    return {model_name(model): work.estimator(model), **baselines, "constant_velocity": work.constant_velocity}


def compare_on_test(
    model: nn.Module, work: TrajectoryWorkload, estimators: dict[str, Estimator]
) -> list[dict[str, Any]]:
    """One row per split and method (``scoring_methods``), all scored on the same windows;
    ``vs_constant_velocity``: the share of the constant-velocity k-step error a method removes. Methods without
    a disturbance estimate (the known-kinematics filter, constant velocity) score its zero."""
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
    """The model's, the tuned EKF's and constant velocity's predictions on ``windows`` windows of ``split``,
    evenly spread, the last the one the wall stops most."""
    units, w, b, k = work.units, work.window, work.burn_in, work.predict_steps
    data = work.windows(split)
    everything = data.gather(torch.arange(len(data)))
    wall_rows = on_wall(everything.pos[:, b + 1 : w + 1], units).sum(1)
    spread = ((torch.arange(windows - 1) + 0.5) * len(data) / windows).long()  # evenly inside the split
    ids = torch.cat([spread, wall_rows.argmax().view(1)])
    batch = data.gather(ids).to(work.device)
    shown = (model_name(model), "ekf_tuned", "constant_velocity")
    with eval_mode(model):
        est = {name: methods[name](batch) for name in shown}
    return Predictions(
        split,
        ids.tolist(),
        b,
        k,
        batch.pos[:, : w + k].cpu() * units.position,
        batch.pos_obs[:, : w + k].cpu() * units.position,
        {name: (batch.pos_obs[:, b:w] + e.ahead[:, b:, -1]).cpu() * units.position for name, e in est.items()},
        batch.disturbance[:, :w].cpu() * units.accel,
        {name: est[name].disturbance.cpu() * units.accel for name in shown[:2]},
        on_wall(batch.pos[:, 1 : w + 1], units).cpu(),
    )


@dataclass
class TestReport:
    """The model against its baselines on the test splits: the rows, the tables as text and the pictures."""

    rows: list[dict[str, Any]]
    tuning: dict[str, float]  # filter -> its data loss on the validation split (what the tuning minimised)
    text: str
    pictures: dict[str, Path]  # dashboard key -> file

    def figures(self, model: str) -> dict[str, float]:
        """Every number of the rows by ``test/<split>/[<method>/]<key>`` (the model's without a method)."""
        return {
            **{
                f"test/{row['split']}/{'' if row['method'] == model else row['method'] + '/'}{key}": value
                for row in self.rows
                for key, value in row.items()
                if isinstance(value, float)
            },
            **{f"val/{name}/data_loss": value for name, value in self.tuning.items()},
        }


def test_report(model: nn.Module, work: TrajectoryWorkload, tuning: TuningSettings, out_dir: Path) -> TestReport:
    """What the test phase and ``mode=eval`` of a dynamics model show: one table of every horizon, the velocity,
    the disturbance and the filters' NEES for every method on both test splits, one of the wall's rows, the error
    against the steps ahead and the predicted-vs-true picture (``test_ood``)."""
    baselines = filters(work, tuning)  # tuned once, for the tables and the picture
    methods = scoring_methods(model, work, baselines)
    rows = compare_on_test(model, work, methods)
    losses = {name: mean_data_loss(flt, work.val, work.burn_in) for name, flt in baselines.items()}
    steps = [key for key in rows[0] if key.startswith("step_")]
    columns = [*COLUMNS[:2], *steps, *COLUMNS[2:]]
    text = (
        format_table(rows, columns)
        + "\n\nstep_j_rmse: the position error j steps ahead; nees: a filter's squared error of its position and "
        "velocity in units of its own covariance, per dimension (1: consistent; above: overconfident); nees_in_95: "
        "the share of rows inside the 95% chi-square bound (0.95: consistent)\n\n"
        + format_table(rows, list(WALL_COLUMNS))
        + "\n\nThe filters' data loss (the TCN's) on the validation split, which the tuning minimised from the\n"
        f"estimated settings ({tuning.steps} steps of gradient descent on the training split)\n"
        + format_table([{"filter": name, "val_data_loss": value} for name, value in losses.items()])
    )
    pictures = {
        "test/predictions": plot_predictions(
            predictions(model, work, methods, "test_ood"), out_dir / PREDICTIONS_PICTURE
        ),
        "test/steps_ahead": plot_steps_ahead(rows, out_dir / STEPS_AHEAD_PICTURE),
    }
    return TestReport(rows, losses, text, pictures)
