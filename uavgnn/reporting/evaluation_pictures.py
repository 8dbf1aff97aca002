"""Pictures of ``mode=eval``: zero-shot transfer across scales, the distribution shifts, the quality-time frontier
(every method, gap against time per scene) and an environment policy beside the planners on every test set."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from uavgnn.infrastructure.console import count
from uavgnn.infrastructure.storage import pyplot, save_figure
from uavgnn.reporting.pictures import legend_below, panel_grid

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

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
                and np.isfinite(_gap(r))
                and np.isfinite(r.get("time_s", np.nan))
            ]
            _frontier_panel(ax, shown)
            scenes = next((r["scenes"] for r in shown), 0)
            bounded = " to a bound" if any("bound_gap" in r for r in shown) else ""
            ax.set_title(f"{n_uav:,} UAVs ({count(scenes, 'scene')}){bounded}", fontsize=7.5)
            ax.set_xscale("log")
            ax.set_yscale("symlog", linthresh=0.1, linscale=0.5)
            top = max((100 * _gap(r) for r in shown), default=1.0)
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
        "gap against the proven optimum (where none is proven, to a certified bound: at most) vs time per scene",
        fontsize=8.5,
    )
    legend_below(fig, handles, fontsize=7)
    return fig


def _frontier_panel(ax: Axes, rows: list[dict[str, Any]]) -> None:
    """One panel of ``plot_frontier``: each row a point, the families joined."""

    def point(row: dict[str, Any]) -> tuple[float, float]:
        return row["time_s"], 100 * _gap(row)

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


def _gap(row: dict[str, Any]) -> float:
    """A row's gap as the frontier draws it: to the certified bound where a set has one (no optimum proven on some
    scene: ``bound_gap``), else to the proven optimum."""
    return float(row.get("bound_gap", row.get("optimality_gap", np.nan)))


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
