"""The trained dynamics model against the constant-velocity baseline on the test splits, with a picture.

``test`` has the training distribution of disturbances, ``test_ood`` wind and
drag ``algorithm.ood_scale`` times stronger. Errors are RMSEs in world units
over every scored row (``TrajectoryWorkload.score``).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from uavgnn.dynamics.kinematics import estimate  # noqa: E402
from uavgnn.dynamics.workload import TrajectoryWorkload  # noqa: E402
from uavgnn.storage import save_figure  # noqa: E402

TEST_SPLITS = ("test", "test_ood")


def compare_on_test(model: nn.Module, work: TrajectoryWorkload) -> list[dict[str, object]]:
    """One row per split and method: the TCN and the constant-velocity baseline."""
    rows: list[dict[str, object]] = []
    for split in TEST_SPLITS:
        s = work.score(model, work.windows(split))
        rows.append({"split": split, "method": "tcn", "k_step_rmse": s["k_step_rmse"], "pred_rmse": s["pred_rmse"],
                     "velocity_rmse": s["velocity_rmse"], "disturbance_rmse": s["disturbance_rmse"],
                     "physics_rmse": s["physics_rmse"], "vs_constant_velocity": s["cv_improvement"]})
        rows.append({"split": split, "method": "constant_velocity", "k_step_rmse": s["cv_k_step_rmse"],
                     "pred_rmse": s["cv_pred_rmse"]})
    return rows


@torch.no_grad()
def plot_predictions(model: nn.Module, work: TrajectoryWorkload, split: str, path: Path, windows: int = 3) -> Path:
    """For a few test windows: true path, noisy observations, the TCN's and the constant-velocity k-step
    predictions from every scored row (top); the TCN's disturbance estimate against the hidden truth (bottom)."""
    units, w, b, k = work.units, work.window, work.burn_in, work.predict_steps
    data = work.windows(split)
    ids = torch.linspace(0, len(data) - 1, windows).long()
    batch = data.gather(ids).to(work.device)
    model.eval()
    est = estimate(model, batch, w, k)
    fig, axes = plt.subplots(2, windows, figsize=(4.5 * windows, 8), squeeze=False)
    for col in range(windows):
        ax = axes[0, col]
        true, obs = (t[col, :w + k].cpu() * units.position for t in (batch.pos, batch.pos_obs))
        ahead = (batch.pos_obs[col, b:w, None] + est.ahead[col, b:]).cpu() * units.position  # (rows, k, 2)
        last = obs[b:w] - obs[b - 1:w - 1]
        cv = obs[b:w, None] + torch.arange(1, k + 1)[:, None] * last[:, None]
        ax.plot(*true.T, "k-", lw=1.5, label="true path")
        ax.plot(*obs.T, ".", c="tab:gray", ms=4, label="observed (noisy)")
        ax.plot(*ahead[:, -1].T, "x", c="tab:blue", ms=5, label=f"TCN, {k} steps ahead")
        ax.plot(*cv[:, -1].T, "+", c="tab:orange", ms=6, label=f"constant velocity, {k} ahead")
        ax.set(xlabel="x", ylabel="y", title=f"{split} window {int(ids[col])}", aspect="equal")
        ax.legend(fontsize=7, loc="best")
        ax = axes[1, col]
        rows = torch.arange(w)
        for dim, name in enumerate("xy"):
            ax.plot(rows, batch.disturbance[col, :w, dim].cpu() * units.accel, "-", c=f"C{dim}", label=f"true d{name}")
            ax.plot(rows, est.disturbance[col, :, dim].cpu() * units.accel, "--", c=f"C{dim}",
                    label=f"estimated d{name}")
        ax.axvspan(0, b, color="0.9", label="burn-in (not scored)")
        ax.set(xlabel="row", ylabel="disturbance acceleration", title="hidden disturbance")
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path
