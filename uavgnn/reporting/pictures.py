"""Pictures of results: a scene with its assignment, a profiled step, the benchmark, zero-shot transfer, shifts and
the quality-time frontier."""

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


def plot_transfer(rows: list[dict[str, Any]], train_size: int, path: Path) -> None:
    """Optimality gap and time per scene vs scale (log axes), every method, one line style per distribution."""
    plt = pyplot()
    fig, (gap_ax, time_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    for p_i, positions in enumerate(dict.fromkeys(r["positions"] for r in rows)):
        for m_i, method in enumerate(methods):
            mine = [r for r in rows if r["positions"] == positions and r["method"] == method and "time_s" in r]
            if not mine:
                continue
            # methods that score the same (lap and mcf are both exact for one-UAV needs) stay visible: each its
            # own marker, the later ones hollow and larger so the earlier show through
            style = dict(
                color=f"C{m_i}",
                ls=("-", "--", ":")[p_i % 3],
                marker="osD^vPX"[m_i % 7],
                ms=4 + 1.5 * m_i,
                mfc="none" if m_i else f"C{m_i}",
                lw=1.2,
                label=f"{method}, {positions}",
            )
            if method != "milp":  # the MILP is the reference: gap 0 by definition
                gap_ax.plot([r["n_uav"] for r in mine], [100 * r["optimality_gap"] for r in mine], **style)
            time_ax.plot([r["n_uav"] for r in mine], [r["time_s"] for r in mine], **style)
    scales = sorted({r["n_uav"] for r in rows})
    for ax in (gap_ax, time_ax):
        ax.axvline(train_size, color="gray", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xticks(scales, [str(n) for n in scales])
        ax.minorticks_off()
    gap_ax.set(
        xlabel="UAVs per scene",
        ylabel="gap vs proven-optimal MILP (%)",
        title=f"zero-shot gap (trained on {train_size} UAVs)",
    )
    time_ax.set(yscale="log", xlabel="UAVs per scene", ylabel="seconds per scene", title="wall time")
    handles, labels = time_ax.get_legend_handles_labels()  # below the panels, over no line
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.06 + 0.035 * ((len(labels) - 1) // 4), 1, 1))
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def plot_shifts(summary: list[dict[str, Any]], train_size: int, path: Path) -> None:
    """Gap of every method on each shifted test set (grouped bars), the in-distribution set first."""
    methods = [m for m in ("model", "pruned", "greedy", "lap", "mcf") if any(f"{m}_gap" in line for line in summary)]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(summary)), 4.5))
    width = 0.8 / len(methods)
    for m_i, method in enumerate(methods):
        gaps = [100 * line.get(f"{method}_gap", float("nan")) for line in summary]
        ax.bar(
            [i + (m_i - (len(methods) - 1) / 2) * width for i in range(len(summary))],
            gaps,
            width,
            color=f"C{m_i}",
            label="model-pruned milp" if method == "pruned" else method,
        )
    ax.set_xticks(range(len(summary)), [line["test_set"] for line in summary], rotation=30, ha="right")
    ax.set(ylabel="gap vs proven-optimal MILP (%)", title=f"shifted test sets ({train_size} UAVs)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)


# the frontier's families: (row name prefix, colour, marker); a family's points are joined in the order given
DECISIONS = (
    ("model (", "o"),
    ("single-stage (", "v"),
    ("unbalanced (", "^"),
    ("unrefined (", "<"),
    ("sampled (", "*"),
)  # the model's own decision: red, one marker each
PRUNED = (
    ("model-pruned milp", "C3"),
    ("nearest-pruned milp", "C0"),
    ("value-pruned milp", "C2"),
    ("relaxation-pruned milp", "C4"),
)  # square markers, keep 1 -> 2 joined
BASELINES = (
    ("greedy", "C7", "v"),
    ("lap", "C8", "D"),
    ("mcf", "C5", "^"),
    ("mcf + repair", "C1", "<"),
    ("milp", "k", "*"),
)


def plot_frontier(rows: list[dict[str, Any]], path: Path) -> None:
    """``frontier_figure`` saved to ``path`` (at the figure's own dpi: the constrained layout holds)."""
    fig = frontier_figure(rows)
    save_figure(fig, path)
    pyplot().close(fig)


def frontier_figure(rows: list[dict[str, Any]]) -> Figure:
    """Gap against time per scene, every method, a panel per test distribution (rows) and scale (columns): what
    each method's time buys, the lower left wins. The model's own decisions in red circles and triangles; the
    pruned MILPs as lines of squares (keep 1, 2, ... joined), one colour per pruner, the model's red; the full MILP
    stopped at each budget as a black line of crosses; greedy, lap, min-cost flow (with and without a rule's
    repair) and the MILP as single points. Sized for a paper (1.8 inches a panel, 7 inches at least, text at
    6.5-8.5 points); the legend below the panels in as many columns as fit the figure's width (constrained layout:
    nothing cut, nothing overlapping)."""
    scales = sorted({r["n_uav"] for r in rows})
    positions = list(dict.fromkeys(r["positions"] for r in rows))
    fig, axes = pyplot().subplots(
        len(positions),
        len(scales),
        figsize=(max(1.8 * len(scales) + 0.5, 7.0), 1.8 * len(positions) + 1.2),
        dpi=150,
        squeeze=False,
        layout="constrained",
    )
    for p_i, label in enumerate(positions):
        for s_i, n_uav in enumerate(scales):
            ax = axes[p_i, s_i]
            shown = [
                r
                for r in rows
                if (r["positions"], r["n_uav"]) == (label, n_uav)
                and np.isfinite(r.get("optimality_gap", np.nan))
                and np.isfinite(r.get("time_s", np.nan))
            ]
            _frontier_panel(ax, shown)
            scenes = next((r["scenes"] for r in shown), 0)
            ax.set_title(f"{n_uav:,} UAVs ({count(scenes, 'scene')})", fontsize=7.5)
            ax.set_xscale("log")
            ax.set_yscale("symlog", linthresh=0.1, linscale=0.5)
            top = max((100 * r["optimality_gap"] for r in shown), default=1.0)
            ax.set_ylim(-0.01, 2 * top if top > 0.1 else 0.2)  # a gap of 0 (the MILP) just above the axis
            ax.grid(alpha=0.3, which="both", lw=0.4)
            ax.tick_params(labelsize=6.5)
            if s_i == 0:
                ax.set_ylabel(f"{label}: gap (%)", fontsize=7.5)
            if p_i == len(positions) - 1:
                ax.set_xlabel("seconds per scene", fontsize=7.5)
    handles: dict[str, Any] = {}
    for ax in axes.flat:
        handles.update(dict(zip(*reversed(ax.get_legend_handles_labels()))))
    fig.suptitle(
        "gap against the proven optimum (where none is proven: the best found) vs time per scene", fontsize=8.5
    )
    legend_below(fig, handles, fontsize=7)
    return fig


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


def _frontier_panel(ax: Axes, rows: list[dict[str, Any]]) -> None:
    """One panel of ``plot_frontier``: each row a point, the families joined."""

    def point(row: dict[str, Any]) -> tuple[float, float]:
        return row["time_s"], 100 * row["optimality_gap"]

    for prefix, marker in DECISIONS:
        for row in (r for r in rows if r["method"].startswith(prefix)):
            ax.plot(
                *point(row),
                ls="none",
                marker=marker,
                ms=6,
                color="C3",
                mfc="C3" if marker == "o" else "none",
                label=row["method"],
            )
    for prefix, color in PRUNED:
        family = [r for r in rows if r["method"].startswith(prefix)]
        if family:
            ax.plot(
                *zip(*map(point, family)),
                marker="s",
                ms=4,
                lw=1,
                color=color,
                label=f"{prefix} (keep {', '.join(m.split('keep ')[-1].rstrip(')') for m in _names(family))})",
            )
    budgets = [r for r in rows if r["method"].startswith("milp (")]
    if budgets:
        ax.plot(
            *zip(*map(point, budgets)),
            marker="x",
            ms=5,
            lw=1,
            color="k",
            ls=":",
            label=f"milp stopped at {', '.join(m[6:-1] for m in _names(budgets))}",
        )
    for name, color, marker in BASELINES:
        for row in (r for r in rows if r["method"] == name):
            ax.plot(*point(row), ls="none", marker=marker, ms=6, color=color, label=name)


def _names(rows: list[dict[str, Any]]) -> list[str]:
    return [r["method"] for r in rows]


def plot_test_sets(rows: list[dict[str, Any]], methods: list[str], path: Path) -> Path:
    """``methods`` on every test set (grouped bars, the nominal set first), one panel per swarm size: each return
    as a share of the central planner's nominal return at that size (``of_nominal_planner``)."""
    sizes = sorted({r["n_uav"] for r in rows})
    sets = list(dict.fromkeys(r["test_set"] for r in rows))
    fig, axes = panel_grid(len(sizes), width=max(4.5, 1.0 * len(sets) + 1.5), height=4.0)
    fig.set_layout_engine("constrained")
    width = 0.8 / len(methods)
    for ax, n_uav in zip(axes, sizes):
        for m_i, method in enumerate(methods):
            share = {
                r["test_set"]: r["of_nominal_planner"] for r in rows if r["n_uav"] == n_uav and r["method"] == method
            }
            x = np.arange(len(sets)) + (m_i - (len(methods) - 1) / 2) * width
            ax.bar(x, [100 * share.get(s, np.nan) for s in sets], width, color=f"C{m_i}", label=method)
        ax.axhline(100, color="gray", ls=":", lw=1)
        ax.set_xticks(np.arange(len(sets)), [s.replace("_", "\n") for s in sets], fontsize=8)
        ax.set(title=f"{n_uav} UAVs", ylabel="% of the central planner's nominal return")
        ax.set_ylim(bottom=min(0.0, ax.get_ylim()[0]))
    handles = dict(zip(*axes[0].get_legend_handles_labels()[::-1]))
    legend_below(fig, handles, fontsize=8)
    save_figure(fig, path, dpi=110)
    pyplot().close(fig)
    return path
