"""Pictures of episodes: trajectories side by side (PNG), one episode as an animation (GIF), learning curves."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Protocol

import torch

from uavgnn.infrastructure.storage import pyplot, replacing, save_figure
from uavgnn.reporting.pictures import legend_below, panel_grid


class RecordedEpisode(Protocol):
    """What a picture of an episode reads (``uavgnn.envs.policies.EpisodeScores`` has it): the returns of the
    episodes and one episode recorded step by step."""

    episode_return: torch.Tensor  # (E,) team task return
    trajectory: torch.Tensor  # (T + 1, N, 2) the UAVs' positions
    targets: torch.Tensor  # (T + 1, M, 2) the targets' positions at the same steps
    need: torch.Tensor  # (M,) their needs


def completed_targets(scores: RecordedEpisode, service_radius: float):
    """(M,) bool: targets that had ``need`` UAVs within the radius at some step of the recorded episode (each step
    against where the targets were at that step)."""
    within = (scores.trajectory[:, :, None] - scores.targets[:, None]).norm(dim=-1) <= service_radius
    return (within.sum(1) >= scores.need).any(0)


NAMED_UAVS = 20  # up to this many UAVs: a colour and a legend entry each (tab20); more: coloured by index


def uav_colour(i: int, n: int) -> Any:
    """UAV ``i`` of ``n``'s colour: its own (tab10's up to 10 UAVs, tab20's up to ``NAMED_UAVS``), else viridis
    by its index."""
    from matplotlib import colormaps

    if n > NAMED_UAVS:
        return colormaps["viridis"](i / max(n - 1, 1))
    return colormaps["tab10" if n <= 10 else "tab20"](i)


def draw_episode(ax, scores: RecordedEpisode, service_radius: float, upto: int | None = None) -> None:
    """The UAVs' paths (each its colour, ``uav_colour``), their starts, the targets' service radii (filled once
    completed) and needs ("need 2"; beyond 8 targets the number alone), and moving targets' tracks."""
    steps = upto or len(scores.trajectory)
    path, targets = scores.trajectory[:steps], scores.targets[:steps]
    from matplotlib.patches import Circle  # the axes exist already: no pyplot needed here

    done = completed_targets(scores, service_radius)
    n = path.shape[1]
    for i in range(n):
        label = f"UAV {i}" if n <= NAMED_UAVS else (f"UAVs 0-{n - 1} (colour: index, viridis)" if i == 0 else None)
        ax.plot(path[:, i, 0], path[:, i, 1], lw=1.0, marker=".", ms=2.5, color=uav_colour(i, n), label=label)
    ax.scatter(*path[0].T, marker="^", c="k", s=14, zorder=3, label="start")
    if not torch.equal(targets[0], targets[-1]):  # moving targets: their tracks, dotted, to where they are now
        for j in range(targets.shape[1]):
            ax.plot(targets[:, j, 0], targets[:, j, 1], ls=":", lw=1.0, c="tab:red", label="target" if j == 0 else None)
    for j, (x, y) in enumerate(targets[-1].tolist()):
        ax.add_patch(Circle((x, y), service_radius, color="tab:red", alpha=0.35 if done[j] else 0.1))
        need = int(scores.need[j])
        ax.annotate(f"need {need}" if len(done) <= 8 else str(need), (x, y), fontsize=6.5, ha="center", va="center")
    ax.set_aspect("equal")
    ax.set_xlabel("x")
    ax.set_ylabel("y")


def plot_episodes(panels: dict[str, RecordedEpisode], service_radius: float, path: Path) -> Path:
    """The same episode (environment 0) flown by each policy, three panels a row at a paper's text width (8-point
    type), one legend below naming every UAV (beyond ``NAMED_UAVS``: their colour scale); filled targets were
    completed."""
    plt = pyplot()
    with plt.rc_context({"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8}):
        fig, axes = panel_grid(len(panels), width=2.3, height=2.4)
        fig.set_layout_engine("constrained")
        for ax, (name, scores) in zip(axes, panels.items()):
            draw_episode(ax, scores, service_radius)
            ax.set_title(f"{name}: return {float(scores.episode_return[0]):.2f}")
        handles = dict(zip(*reversed(axes[0].get_legend_handles_labels())))
        legend_below(fig, handles, fontsize=7.5)
        title = (
            "UAV paths on one test episode (circles: targets' service radius, filled once completed; "
            "number: the UAVs a target needs at once)"
        )
        fig.suptitle(textwrap.fill(title, 34 * min(3, len(panels))), fontsize=8)  # one panel: lines, not cut
        save_figure(fig, path, dpi=200)
    plt.close(fig)
    return path


def episode_gif(scores: RecordedEpisode, service_radius: float, path: Path, fps: int = 4) -> Path:
    """Environment 0's episode, step by step."""
    plt = pyplot()
    from matplotlib.animation import FuncAnimation, PillowWriter

    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    every = torch.cat([scores.trajectory.flatten(0, 1), scores.targets.flatten(0, 1)])  # UAVs and targets, any step
    low, high = every.min(0).values - service_radius, every.max(0).values + service_radius

    def frame(t: int) -> None:
        ax.clear()
        draw_episode(ax, scores, service_radius, upto=t + 1)
        ax.set_xlim(float(low[0]), float(high[0]))
        ax.set_ylim(float(low[1]), float(high[1]))
        ax.set_title(f"step {t}")

    with replacing(path) as tmp:
        FuncAnimation(fig, frame, frames=len(scores.trajectory)).save(tmp, writer=PillowWriter(fps=fps))
    plt.close(fig)
    return path


def plot_learning_curve(history: list[dict[str, Any]], path: Path) -> Path:
    """Validation return against the scripted planner's and nearest targets' (dashed references), and the
    training episodes' return, per step; a run with one validation still shows every line (a dot, a level)."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (key, label) in enumerate(
        (
            ("val/return", "policy (validation, deterministic)"),
            ("train/episode_return", "training episodes (exploring)"),
            ("val/planner_return", "scripted planner (validation)"),
            ("val/nearest_return", "nearest target, no coordination (validation)"),
        )
    ):
        points = [(row["step"], row[key]) for row in history if key in row]
        reference = key in ("val/planner_return", "val/nearest_return")
        if reference and len(points) == 1:  # a short run's one validation: the reference as a level
            ax.axhline(points[0][1], color=f"C{i}", ls="--", label=label)
        elif points:
            dots = len(points) < 2 or not (reference or key.startswith("train"))
            ax.plot(
                *zip(*points),
                color=f"C{i}",
                marker="o" if dots else None,
                ms=3,
                ls="--" if reference else "-",
                label=label,
            )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("training step (updates)")
    ax.set_ylabel("episode return (team, task reward)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path
