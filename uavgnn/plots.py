"""Pictures of results: a scene with its assignment, a profiled step, the benchmark, zero-shot transfer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from uavgnn.problem.metrics import IDLE  # noqa: E402
from uavgnn.problem.scenes import Scene  # noqa: E402


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
           f"{report['batch_size']}: {report[report['unit'] + '_per_s']:.0f} {report['unit']}/s")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_benchmark(report: dict[str, Any], path: Path) -> None:
    """One panel per ``mode=benchmark`` section that ran."""
    panels = [name for name in ("cache", "pipeline", "toggles", "scaling", "milp") if name in report]
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 4.5 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, name in zip(axes.flat, panels):
        section = report[name]
        if name == "cache":
            ax.bar(["cold build", "warm load"], [section["cold_build_s"], section["warm_load_s"]], color=["C3", "C2"])
            ax.set(yscale="log", ylabel="seconds", title=f"graph cache: {section['cold_over_warm']:.0f}x "
                   f"({section['scenes']} scenes)")
        elif name == "pipeline":
            rates = section["graphs_per_s"]
            ax.bar(list(rates), list(rates.values()), color=["C3", "C0", "C2"])
            ax.set(ylabel="graphs/s (training steps)",
                   title=f"pipeline: {section['optimized_over_naive']:.1f}x naive "
                         f"({section['optimized_amp_over_naive']:.1f}x with AMP)")
        elif name == "toggles":
            names = [t["toggle"] for t in section]
            x = np.arange(len(names))
            ax.bar(x - 0.2, [t["speedup"] for t in section], 0.4, label="speed-up (off/on step time)")
            ax.bar(x + 0.2, [1 - t["memory_saving"] for t in section], 0.4, label="memory on/off")
            ax.axhline(1.0, color="gray", ls="--")
            ax.set_xticks(x, names, rotation=20)
            ax.set(title="optimization toggles")
            ax.legend(fontsize=8)
        elif name == "scaling":
            rows = section["rows"]
            nodes = [r["nodes"] for r in rows]
            for key in ("build_s", "forward_s", "decode_s", "total_s"):
                ax.plot(nodes, [r[key] for r in rows], marker="o", label=key[:-2])
            ax.set(xscale="log", yscale="log", xlabel="nodes in the scene", ylabel="seconds",
                   title=f"inference scaling (slope {section['loglog_slope']:.2f})")
            ax.legend(fontsize=8)
        else:
            rows = section["rows"]
            n = [r["n_uav"] for r in rows]
            ax.plot(n, [r["model_s"] for r in rows], marker="o", label="model (build+forward+decode)")
            ax.plot(n, [r["milp_s"] for r in rows], marker="s", label="MILP (to optimality or limit)")
            ax.set(xscale="log", yscale="log", xlabel="UAVs", ylabel="wall time (s)", title="model vs MILP")
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_transfer(rows: list[dict[str, Any]], train_size: int, path: Path) -> None:
    """Optimality gap and time per scene vs scale (log axes), every method, one line style per distribution."""
    fig, (gap_ax, time_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    for p_i, positions in enumerate(dict.fromkeys(r["positions"] for r in rows)):
        for m_i, method in enumerate(methods):
            mine = [r for r in rows if r["positions"] == positions and r["method"] == method and "time_s" in r]
            if not mine:
                continue
            style = dict(color=f"C{m_i}", ls=("-", "--", ":")[p_i % 3], marker="o", label=f"{method}, {positions}")
            if method != "milp":  # the MILP is the reference: gap 0 by definition
                gap_ax.plot([r["n_uav"] for r in mine], [100 * r["optimality_gap"] for r in mine], **style)
            time_ax.plot([r["n_uav"] for r in mine], [r["time_s"] for r in mine], **style)
    scales = sorted({r["n_uav"] for r in rows})
    for ax in (gap_ax, time_ax):
        ax.axvline(train_size, color="gray", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xticks(scales, [str(n) for n in scales])
        ax.minorticks_off()
    gap_ax.set(xlabel="UAVs per scene", ylabel="gap vs proven-optimal MILP (%)",
               title=f"zero-shot gap (trained on {train_size} UAVs)")
    time_ax.set(yscale="log", xlabel="UAVs per scene", ylabel="seconds per scene", title="wall time")
    time_ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
