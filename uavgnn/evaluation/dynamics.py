"""The trained dynamics model against its baselines (``uavgnn.dynamics.filters``, constant velocity) on the
test splits, with pictures.

``test`` has the training distribution of disturbances, ``test_ood`` wind and
drag ``algorithm.ood_scale`` times stronger. Errors are RMSEs in world units
over every scored row (``TrajectoryWorkload.score``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from uavgnn.dynamics.filters import baseline_filters
from uavgnn.dynamics.kinematics import on_wall
from uavgnn.dynamics.workload import Estimator, TrajectoryWorkload
from uavgnn.infrastructure.device import eval_mode
from uavgnn.infrastructure.storage import pyplot, save_figure

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
def plot_predictions(
    model: nn.Module, work: TrajectoryWorkload, methods: dict[str, Estimator], split: str, path: Path, windows: int = 3
) -> Path:
    """For a few windows of ``split`` (the last: the one the wall stops most): true path, noisy observations
    and the k-step predictions of the TCN, the Kalman filter and constant velocity from every scored row
    (top); the disturbance the TCN and the filter estimate against the hidden truth, rows on the wall shaded
    (bottom). One legend per row of panels, below them."""
    units, w, b, k = work.units, work.window, work.burn_in, work.predict_steps
    data = work.windows(split)
    everything = data.gather(torch.arange(len(data)))
    wall_rows = on_wall(everything.pos[:, b + 1 : w + 1], units).sum(1)
    spread = ((torch.arange(windows - 1) + 0.5) * len(data) / windows).long()  # evenly inside the split
    ids = torch.cat([spread, wall_rows.argmax().view(1)])
    batch = data.gather(ids).to(work.device)
    with eval_mode(model):
        est = {name: methods[name](batch) for name in ("tcn", "kalman", "constant_velocity")}
    look = {
        "tcn": ("x", "tab:blue", "TCN"),
        "kalman": ("1", "tab:green", "Kalman filter"),
        "constant_velocity": ("+", "tab:orange", "constant velocity"),
    }
    plt = pyplot()
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(2, windows, figsize=(4.4 * windows, 9.6), squeeze=False)
    for ax in axes.flat:
        ax.set_box_aspect(1)  # every panel the same square
    for col in range(windows):
        ax = axes[0, col]
        true, obs = (t[col, : w + k].cpu() * units.position for t in (batch.pos, batch.pos_obs))
        ax.plot(*true.T, "k-", lw=1.5, label="true path")
        ax.plot(*obs.T, ".", c="tab:gray", ms=4, label="observed (noisy)")
        for name, (marker, colour, label) in look.items():
            ahead = (batch.pos_obs[col, b:w, None] + est[name].ahead[col, b:]).cpu() * units.position
            ax.plot(*ahead[:, -1].T, marker, c=colour, ms=6, label=f"{label}, {k} steps ahead")
        centre, half = (true.amax(0) + true.amin(0)) / 2, 0.6 * float((true.amax(0) - true.amin(0)).max()) + 0.1
        title = f"{split} window {int(ids[col])}" + (" (the wall's)" if col == windows - 1 else "")
        ax.set(
            xlabel="x (world units)",
            ylabel="y",
            title=title,
            xlim=(centre[0] - half, centre[0] + half),
            ylim=(centre[1] - half, centre[1] + half),
        )
        ax = axes[1, col]
        steps = torch.arange(w)
        for row in on_wall(batch.pos[col, 1 : w + 1], units).nonzero().flatten().tolist():
            ax.axvspan(row - 0.5, row + 0.5, color="0.85", lw=0)
        ax.axvspan(-0.5, b - 0.5, color="0.95", lw=0)
        for dim, axis in enumerate("xy"):
            ax.plot(steps, batch.disturbance[col, :w, dim].cpu() * units.accel, "-", c=f"C{dim}", label=f"true d{axis}")
            for name, style in (("tcn", "--"), ("kalman", ":")):
                ax.plot(
                    steps,
                    est[name].disturbance[col, :, dim].cpu() * units.accel,
                    style,
                    c=f"C{dim}",
                    label=f"{look[name][2]} d{axis}",
                )
        ax.set(xlabel="time step in the window", ylabel="disturbance acceleration", title="hidden disturbance")
    shading = [Patch(color="0.95", label="burn-in (not scored)"), Patch(color="0.85", label="the wall stops the step")]
    for row, extra in ((0, []), (1, shading)):
        handles, labels = axes[row, 0].get_legend_handles_labels()
        legend = axes[row, windows // 2].legend(
            handles + extra,
            labels + [e.get_label() for e in extra],
            loc="upper center",
            bbox_to_anchor=(0.5, -0.16),
            ncol=4,
            fontsize=8,
            frameon=False,
        )
        legend.set_in_layout(False)  # below the panels, in the space h_pad and rect leave
    fig.tight_layout(h_pad=5.0, rect=(0, 0.06, 1, 1))
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


def plot_steps_ahead(rows: list[dict[str, Any]], path: Path) -> Path:
    """The position error against the number of steps ahead, one line per method, one panel per test split."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(TEST_SPLITS), figsize=(5.5 * len(TEST_SPLITS), 4.2), squeeze=False, sharey=True)
    for ax, split in zip(axes[0], TEST_SPLITS):
        for i, row in enumerate(r for r in rows if r["split"] == split):
            errors = [value for key, value in row.items() if key.startswith("step_")]
            ax.plot(range(1, len(errors) + 1), errors, marker="osD^"[i % 4], c=f"C{i}", label=row["method"])
        ax.set(
            xlabel="steps ahead", ylabel="position RMSE (world units)", title=split, xticks=range(1, len(errors) + 1)
        )
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path
