"""Pictures of results: one scene with its assignment."""

from __future__ import annotations

from pathlib import Path

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
