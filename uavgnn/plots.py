"""Pictures of results: one scene with its assignment, the stages of a profiled step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from uavgnn.metrics import IDLE  # noqa: E402
from uavgnn.scenes import Scene  # noqa: E402


def plot_assignment(scene: Scene, assignment: np.ndarray, path: Path, title: str = "") -> Path:
    """UAVs (triangles), targets (circles sized by need; filled if completed) and assignment lines."""
    fig, ax = plt.subplots(figsize=(6, 6))
    busy = assignment != IDLE
    count = np.bincount(assignment[busy], minlength=scene.n_target)
    done = count >= scene.need
    for i in np.nonzero(busy)[0]:
        t = scene.target_pos[assignment[i]]
        ax.plot([scene.uav_pos[i, 0], t[0]], [scene.uav_pos[i, 1], t[1]], color="tab:green", lw=1, alpha=0.7)
    size = 40 + 60 * scene.need
    ax.scatter(*scene.target_pos[done].T, s=size[done], c="tab:red", edgecolors="k", label="target (completed)")
    ax.scatter(*scene.target_pos[~done].T, s=size[~done], facecolors="none", edgecolors="tab:red",
               label="target (not completed)")
    ax.scatter(*scene.uav_pos[busy].T, marker="^", c="tab:blue", label="UAV (assigned)")
    ax.scatter(*scene.uav_pos[~busy].T, marker="^", c="lightgray", edgecolors="tab:blue", label="UAV (idle)")
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_profile(report: dict[str, Any], path: Path) -> None:
    """ms per step of each stage of ``mode=profile``, the bottleneck in red."""
    stages = report["stages"]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    colors = ["C3" if s["stage"] == report["bottleneck"] else "C0" for s in stages]
    ax.barh([s["stage"] for s in stages], [s["ms_per_step"] for s in stages], color=colors)
    for i, s in enumerate(stages):
        ax.text(s["ms_per_step"], i, f" {s['share']:.0%}", va="center")
    ax.invert_yaxis()
    ax.set(xlabel="ms per step (median)", title=f"{report['model']} on {report['device']}, batch "
           f"{report['batch_size']}: {report['graphs_per_s']:.0f} graphs/s")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
