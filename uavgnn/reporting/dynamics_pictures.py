"""Pictures of the dynamics model on its test splits: its predictions beside the filter's and constant velocity's
on a few windows (and the hidden disturbance each estimates), and the error against the number of steps ahead."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from uavgnn.infrastructure.storage import pyplot, save_figure

LOOK = {  # method -> (marker, colour, label, line style of its disturbance)
    "tcn": ("x", "tab:blue", "TCN", "--"),
    "learned_filter": ("x", "tab:purple", "learned filter", "--"),
    "ekf_tuned": ("1", "tab:green", "EKF (tuned)", ":"),
    "constant_velocity": ("+", "tab:orange", "constant velocity", "-."),
}


@dataclass
class Predictions:
    """A few windows of a split as the pictures show them, in world units, on the host: the true and observed
    paths, each method's k-step-ahead predictions from every scored row, the hidden disturbance and each method's
    estimate of it, and the rows the wall stops."""

    split: str
    windows: list[int]  # their indices in the split (the last: the one the wall stops most)
    burn_in: int
    steps_ahead: int
    true: torch.Tensor  # (W, window + k, 2)
    observed: torch.Tensor  # (W, window + k, 2)
    ahead: dict[
        str, torch.Tensor
    ]  # method (a ``LOOK`` key) -> (W, window - burn_in, 2): where it puts the UAV k steps ahead
    disturbance: torch.Tensor  # (W, window, 2) the truth
    estimated: dict[str, torch.Tensor]  # method -> (W, window, 2)
    on_wall: torch.Tensor  # (W, window) bool


def plot_predictions(shown: Predictions, path: Path) -> Path:
    """For each window: the true path, the noisy observations and each method's k-step predictions from every
    scored row (top); the disturbance the TCN and the filter estimate against the hidden truth, the rows on the wall
    shaded (bottom). One legend per row of panels, below them."""
    windows, b, k = len(shown.windows), shown.burn_in, shown.steps_ahead
    w = shown.disturbance.shape[1]
    plt = pyplot()
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(2, windows, figsize=(4.4 * windows, 9.6), squeeze=False)
    for ax in axes.flat:
        ax.set_box_aspect(1)  # every panel the same square
    for col in range(windows):
        ax = axes[0, col]
        true, obs = shown.true[col], shown.observed[col]
        ax.plot(*true.T, "k-", lw=1.5, label="true path")
        ax.plot(*obs.T, ".", c="tab:gray", ms=4, label="observed (noisy)")
        for name, ahead in shown.ahead.items():
            marker, colour, label, _ = LOOK[name]
            ax.plot(*ahead[col].T, marker, c=colour, ms=6, label=f"{label}, {k} steps ahead")
        centre, half = (true.amax(0) + true.amin(0)) / 2, 0.6 * float((true.amax(0) - true.amin(0)).max()) + 0.1
        title = f"{shown.split} window {shown.windows[col]}" + (" (the wall's)" if col == windows - 1 else "")
        ax.set(
            xlabel="x (world units)",
            ylabel="y",
            title=title,
            xlim=(centre[0] - half, centre[0] + half),
            ylim=(centre[1] - half, centre[1] + half),
        )
        ax = axes[1, col]
        steps = torch.arange(w)
        for row in shown.on_wall[col].nonzero().flatten().tolist():
            ax.axvspan(row - 0.5, row + 0.5, color="0.85", lw=0)
        ax.axvspan(-0.5, b - 0.5, color="0.95", lw=0)
        for dim, axis in enumerate("xy"):
            ax.plot(steps, shown.disturbance[col, :, dim], "-", c=f"C{dim}", label=f"true d{axis}")
            for name, estimated in shown.estimated.items():
                _, _, label, style = LOOK[name]
                ax.plot(steps, estimated[col, :, dim], style, c=f"C{dim}", label=f"{label} d{axis}")
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


def log_error_axis(ax: Any) -> None:
    """A log-scale error axis read in plain numbers (ticks at 1, 2 and 5 of each decade): one step ahead, where the
    errors are smallest, reads as well as five."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(alpha=0.3, which="both")


def plot_steps_ahead(rows: list[dict[str, Any]], path: Path) -> Path:
    """The position error against the number of steps ahead, one line per method (the filters' estimated settings
    dashed), one panel per test split, on a log scale (``log_error_axis``)."""
    splits = list(dict.fromkeys(row["split"] for row in rows))
    plt = pyplot()
    fig, axes = plt.subplots(1, len(splits), figsize=(5.5 * len(splits), 4.2), squeeze=False, sharey=True)
    for ax, split in zip(axes[0], splits):
        for i, row in enumerate(r for r in rows if r["split"] == split):
            errors = [value for key, value in row.items() if key.startswith("step_")]
            dashed = "--" if row["method"].endswith("_estimated") else "-"
            ax.plot(range(1, len(errors) + 1), errors, dashed, marker="osD^v<"[i % 6], c=f"C{i}", label=row["method"])
        ax.set(
            xlabel="steps ahead",
            ylabel="position RMSE (world units, log scale)",
            title=split,
            xticks=range(1, len(errors) + 1),
        )
        log_error_axis(ax)
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path
