"""Pictures of results: a scene with its assignment, a profiled step, the benchmark; the panels and legends every
picture of the package lays out (``panel_grid``, ``legend_below``)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from uavgnn.infrastructure.console import count
from uavgnn.infrastructure.storage import pyplot, save_figure
from uavgnn.problem.metrics import IDLE
from uavgnn.problem.scenes import Scene

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def plot_assignments(scene: Scene, panels: dict[str, np.ndarray], path: Path, title: str = "") -> Path:
    """One scene, one panel per assignment (e.g. the model's and the MILP's) side by side (``assignments_figure``),
    saved to ``path``."""
    fig = assignments_figure(scene, panels, title)
    save_figure(fig, path)  # at the figure's own dpi: another would move what the constrained layout placed
    pyplot().close(fig)
    return path


def assignments_figure(scene: Scene, panels: dict[str, np.ndarray], title: str = "") -> Figure:
    """UAVs (triangles), targets (circles sized by need; filled if completed) and assignment lines, a panel per
    assignment; the title above the panels' own, the legend below their x labels (constrained layout: nothing
    overlaps and nothing is cut), sized for a paper's text width (7 inches for two panels)."""
    plt = pyplot()
    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=(3.5 * len(panels), 4.0),
        dpi=150,
        squeeze=False,
        sharex=True,
        sharey=True,
        layout="constrained",
    )
    size = 20 + 30 * scene.need
    for ax, (name, assignment) in zip(axes[0], panels.items()):
        busy = assignment != IDLE
        done = np.bincount(assignment[busy], minlength=scene.n_target) >= scene.need
        for i in np.nonzero(busy)[0]:
            t = scene.target_pos[assignment[i]]
            ax.plot([scene.uav_pos[i, 0], t[0]], [scene.uav_pos[i, 1], t[1]], color="tab:green", lw=1, alpha=0.7)
        ax.scatter(*scene.target_pos[done].T, s=size[done], c="tab:red", edgecolors="k", zorder=3)
        ax.scatter(*scene.target_pos[~done].T, s=size[~done], facecolors="none", edgecolors="tab:red", zorder=3)
        ax.scatter(*scene.uav_pos[busy].T, s=18, marker="^", c="tab:blue", zorder=4)
        ax.scatter(*scene.uav_pos[~busy].T, s=18, marker="^", c="lightgray", edgecolors="tab:blue", zorder=4)
        ax.set_aspect("equal")
        completed = f"{int(done.sum())} of {count(scene.n_target, 'target')} completed"
        ax.set_title(f"{name}: {completed}", fontsize=9)
        ax.set_xlabel("x", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.2)
    axes[0, 0].set_ylabel("y", fontsize=8)
    fig.legend(handles=_assignment_legend(), loc="outside lower center", ncol=3, fontsize=7, frameon=False)
    if title:
        fig.suptitle(balanced(title, 100), fontsize=9)  # 100 characters fit the figure's 7 inches at 9 points
    return fig


def balanced(text: str, width: int) -> str:
    """``text`` on as few lines of at most ``width`` characters as it needs, of about equal length (no widow)."""
    lines = -(-len(text) // width)
    return textwrap.fill(text, min(width, -(-len(text) // lines) + 10))


def _assignment_legend() -> list[Any]:
    """The legend's entries drawn alike whatever the scene (a scatter's own handle takes its first point's size:
    a target of need 1 or none at all)."""
    from matplotlib.lines import Line2D

    def mark(label: str, **style: Any) -> Line2D:
        return Line2D([], [], ls="none", label=label, **style)

    return [
        Line2D([], [], color="tab:green", lw=1, alpha=0.7, label="assignment"),
        mark("target (completed)", marker="o", ms=8, mfc="tab:red", mec="k"),
        mark("target (not completed)", marker="o", ms=8, mfc="none", mec="tab:red"),
        mark("UAV (assigned)", marker="^", ms=5, mfc="tab:blue", mec="tab:blue"),
        mark("UAV (idle)", marker="^", ms=5, mfc="lightgray", mec="tab:blue"),
    ]


def plot_profile(report: dict[str, Any], path: Path) -> None:
    """ms per step of each stage of ``mode=profile``, the bottleneck in red."""
    stages = report["stages"]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    colors = ["C3" if s["stage"] == report["bottleneck"] else "C0" for s in stages]
    ax.barh([s["stage"] for s in stages], [s["ms_per_step"] for s in stages], color=colors)
    for i, s in enumerate(stages):
        ax.text(s["ms_per_step"], i, f" {s['share']:.0%}", va="center")
    ax.invert_yaxis()
    ax.set(
        xlabel="ms per step (median)",
        title=f"{report['model']} on {report['device']}, batch "
        f"{report['batch_size']}: {report[report['unit'] + '_per_s']:.0f} {report['unit']}/s",
    )
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def _error_bars(figures: list[dict[str, Any]]) -> np.ndarray:
    """Matplotlib ``yerr`` from ``measure`` records: from each median down to the min and up to the max."""
    return np.array([[f["median"] - f["min"] for f in figures], [f["max"] - f["median"] for f in figures]])


def panel_grid(n: int, width: float = 5.5, height: float = 4.5) -> tuple[Figure, list[Axes]]:
    """``n`` panels in rows of at most 3, the last row's panels widened to fill it: no empty panel."""
    rows = -(-n // 3)
    fig = pyplot().figure(figsize=(width * min(3, n), height * rows))
    grid = fig.add_gridspec(rows, 6)
    axes = []
    for i in range(n):
        row, in_row = divmod(i, 3)
        span = 6 // min(3, n - 3 * row)
        axes.append(fig.add_subplot(grid[row, in_row * span : (in_row + 1) * span]))
    return fig, axes


def plot_benchmark(report: dict[str, Any], path: Path) -> None:
    """One panel per ``mode=benchmark`` section that ran; whiskers span each figure's repeats (min to max)."""
    panels = [name for name in ("cache", "pipeline", "toggles", "scaling", "milp") if name in report]
    plt = pyplot()
    fig, axes = panel_grid(len(panels))
    for ax, name in zip(axes, panels):
        section = report[name]
        if name == "cache":
            warm = section["repeats"]["warm_load_s"]
            ax.bar(
                ["cold build (x1)", f"warm load (median of {warm['repeats']})"],
                [section["cold_build_s"], section["warm_load_s"]],
                color=["C3", "C2"],
                yerr=np.hstack([[[0], [0]], _error_bars([warm])]),
                capsize=4,
            )
            ax.set(
                yscale="log",
                xlabel="graph cache",
                ylabel="seconds",
                title=f"graph cache: {section['cold_over_warm']:.0f}x ({count(section['scenes'], 'scene')})",
            )
        elif name == "pipeline":
            figures = section["repeats"]
            ax.bar(
                list(figures),
                [f["median"] for f in figures.values()],
                color=["C3", "C0", "C2"],
                yerr=_error_bars(list(figures.values())),
                capsize=4,
            )
            ax.set(
                xlabel="input pipeline",
                ylabel="graphs/s (whole training steps)",
                title=f"pipeline: {section['optimized_over_naive']:.1f}x naive "
                f"({section['optimized_amp_over_naive']:.1f}x with AMP)",
            )
        elif name == "toggles":
            names = [t["toggle"] for t in section]
            x = np.arange(len(names))
            ax.bar(
                x - 0.2,
                [t["off"]["step_ms"] for t in section],
                0.4,
                label="off",
                yerr=_error_bars([t["repeats"]["off"] for t in section]),
                capsize=3,
            )
            ax.bar(
                x + 0.2,
                [t["on"]["step_ms"] for t in section],
                0.4,
                label="on",
                yerr=_error_bars([t["repeats"]["on"] for t in section]),
                capsize=3,
            )
            for i, t in enumerate(section):
                ax.annotate(f"{t['speedup']:.2f}x", (x[i], t["off"]["step_ms"]), ha="center", va="bottom", fontsize=8)
            ax.set_xticks(x, names, rotation=20)
            ax.set(
                yscale="log",
                xlabel="toggle (speed-up above the bars)",
                ylabel="ms per training step",
                title="optimization toggles",
            )
            ax.legend(fontsize=8)
        elif name == "scaling":
            rows = section["rows"]
            nodes = [r["nodes"] for r in rows]
            for key in ("build_s", "forward_s", "decode_s"):
                ax.plot(nodes, [r[key] for r in rows], marker="o", label=key[:-2])
            ax.errorbar(
                nodes,
                [r["total_s"] for r in rows],
                yerr=_error_bars([r["repeats"] for r in rows]),
                marker="o",
                capsize=3,
                label="total (min-max of repeats)",
            )
            ax.set(
                xscale="log",
                yscale="log",
                xlabel="nodes in the scene",
                ylabel="seconds",
                title=f"inference scaling (slope {section['loglog_slope']:.2f})",
            )
            ax.legend(fontsize=8)
        else:
            rows = section["rows"]
            n = [r["n_uav"] for r in rows]
            ax.errorbar(
                n,
                [r["model_s"] for r in rows],
                yerr=_error_bars([r["repeats"]["model_s"] for r in rows]),
                marker="o",
                capsize=3,
                label="model (build+forward+decode)",
            )
            ax.plot(n, [r["milp_s"] for r in rows], marker="s", label="MILP, one run (to optimality or limit)")
            ax.set(xscale="log", yscale="log", xlabel="UAVs", ylabel="wall time (s)", title="model vs MILP")
            ax.legend(fontsize=8)
        ax.grid(alpha=0.3, which="both")
    fig.suptitle(
        f"mode=benchmark on {report['device']} ({report['threads']} threads); "
        f"bars and points: medians of up to {report['repeats']} repeats",
        fontsize=10,
    )
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def legend_below(fig: Figure, handles: dict[str, Any], fontsize: float = 6.5) -> Any:
    """One legend below the panels, in as many columns as fit the figure's width (measured: no entry cut)."""
    renderer = fig.canvas.get_renderer()
    for columns in range(len(handles), 0, -1):
        legend = fig.legend(
            handles.values(), handles.keys(), loc="outside lower center", ncol=columns, fontsize=fontsize, frameon=False
        )
        if columns == 1 or legend.get_window_extent(renderer).width <= 0.97 * fig.bbox.width:
            return legend
        legend.remove()
    return None
