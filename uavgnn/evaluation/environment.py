"""``mode=eval ckpt=<an environment policy's best.pt>``: the policy on fixed test episodes.

The policy flies ``eval.episodes`` episodes of the environment and scenes it was trained in (the test seed:
disjoint from validation's, the same for every checkpoint), beside the scripted planner, nearest targets and
random actions on the same episodes: return (team and per UAV), its spread, completion, collisions and
``of_planner`` (the share of the planner's return), at the swarm size it was trained for and - a graph actor,
one set of weights for any number of UAVs - zero-shot at every ``eval.scales`` size (episodes per size:
``eval.max_total_uavs // n_uav`` at most), on the nominal test set (no disruption, whatever the policy trained in)
and each disrupted one (``eval.disruption_sets``: UAV failures, limited communication, moving targets;
``uavgnn.envs.disruptions``), with the central and the decentralised scripted planner. Writes ``eval.json``,
``test_sets.png`` (every method on every test set and size, as a share of the central planner's nominal return),
``trajectories.png`` (one episode by each policy) and ``episode.gif``, and logs the tables and the pictures to the
configured dashboard.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from uavgnn.algorithms.env_policy import EnvPolicy, load_env_policy
from uavgnn.configuration.schemas import Config
from uavgnn.configuration.settings import env_settings, scene_distribution
from uavgnn.envs import disruptions
from uavgnn.evaluation.episodes import IDLE_HOME, TEST_SEED, TOLD_MOTION, compare_policies
from uavgnn.infrastructure.console import count, echo
from uavgnn.infrastructure.device import prepare_device
from uavgnn.infrastructure.storage import pyplot, save_figure, write_json
from uavgnn.loggers.metric_logger import publish
from uavgnn.reporting.episodes import episode_gif, plot_episodes
from uavgnn.reporting.pictures import legend_below, panel_grid
from uavgnn.reporting.tables import format_table
from uavgnn.runs.layout import EPISODE, EVAL, TEST_SETS, TRAJECTORIES

COLUMNS = [
    "n_uav",
    "test_set",
    "method",
    "return",
    "return_std",
    "return_per_uav",
    "completion_rate",
    "collisions",
    "of_planner",
    "of_nominal_planner",
    "time_s",
]


def swarm_sizes(cfg: Config, config: Any) -> list[int]:
    """The sizes to score at: the training size, and ``eval.scales`` where one set of weights serves every UAV
    (a graph actor: ``model`` a TransformerGNN size); per-agent networks fit their training size only."""
    trained = config.env.n_uav
    if EnvPolicy.is_mlp(config):
        if set(cfg.eval.scales) - {trained}:
            echo(
                f"model=mlp: the policy's networks are per agent (or take one-hot agent ids): scored at its "
                f"{count(trained, 'UAV')} only (eval.scales={list(cfg.eval.scales)} takes a graph actor)"
            )
        return [trained]
    return sorted({trained, *cfg.eval.scales})


# every test set starts from no disruption, in every episode (whatever trained)
NOMINAL = {**{name: 0 for name in disruptions.FIELDS}, "disrupted_share": 1.0, "one_disruption": False}


def test_sets(cfg: Config) -> dict[str, dict[str, Any]]:
    """The nominal test set and each disrupted one run (``eval.disruption_sets``): name -> env fields changed."""
    return {"nominal": {}, **{name: dict(cfg.eval.disruptions[name]) for name in cfg.eval.disruption_sets}}


def run_env_eval(cfg: Config, out_dir: Path) -> dict[str, Any]:
    device = prepare_device(cfg)
    policy, config = load_env_policy(cfg.ckpt, "mode=eval ckpt", device)
    trained, dist = env_settings(config), scene_distribution(config)
    name, rows, sets = config.algorithm.name, [], test_sets(cfg)
    flown = {trained.n_uav, *config.env.get("train_sizes", [])}  # the sizes it trained at: not zero-shot there
    for n_uav in swarm_sizes(cfg, config):
        episodes = max(1, min(cfg.eval.episodes, cfg.eval.max_total_uavs // n_uav))
        size_rows, nominal = [], None
        for test_set, change in sets.items():
            settings = dataclasses.replace(trained, n_uav=n_uav, **{**NOMINAL, **change})
            set_rows, set_scores = compare_policies({name: policy}, settings, dist, episodes, device)
            if test_set == "nominal":
                nominal = next(r["return"] for r in set_rows if r["method"] == "scripted planner")
            for row in set_rows:
                row.update(
                    n_uav=n_uav,
                    test_set=test_set,
                    return_per_uav=round(row["return"] / n_uav, 4),
                    of_nominal_planner=round(row["return"] / nominal, 4) if nominal else float("nan"),
                )
            size_rows += set_rows
            if n_uav == trained.n_uav and test_set == "nominal":
                scores = set_scores
        rows += size_rows
        echo(
            f"Test episodes: {count(episodes, 'episode')} of {count(n_uav, 'UAV')}, {trained.horizon} steps "
            f"({trained.name} environment, {dist.positions} scenes), {name} from {cfg.ckpt}"
            f"{'' if n_uav in flown else ' (zero-shot: trained at ' + ', '.join(map(str, sorted(flown))) + ')'}\n"
            + format_table(size_rows, COLUMNS)
        )
    echo(
        "of_planner: the share of the central scripted planner's return on the same test set; of_nominal_planner: "
        "of its return on the nominal set"
    )
    plot_episodes(scores, trained.service_radius, out_dir / TRAJECTORIES)
    episode_gif(scores[name], trained.service_radius, out_dir / EPISODE)
    pictures = {"eval/trajectories": out_dir / TRAJECTORIES}
    if len(sets) > 1:
        pictures["eval/test_sets"] = plot_test_sets(rows, name, out_dir / TEST_SETS)
    report = {
        "checkpoint": str(cfg.ckpt),
        "algorithm": name,
        "n_uav": trained.n_uav,
        "horizon": trained.horizon,
        "episodes": cfg.eval.episodes,
        "seed": TEST_SEED,
        "test_sets": sets,
        "rows": rows,
    }
    write_json(out_dir / EVAL, report)
    summary = {
        f"eval/{'' if row['n_uav'] == trained.n_uav else 'n' + str(row['n_uav']) + '/'}"
        f"{'' if row['test_set'] == 'nominal' else row['test_set'] + '/'}{key}": row[key]
        for row in rows
        if row["method"] == name
        for key in ("return", "of_planner", "completion_rate")
    }
    publish(cfg, out_dir, {"eval/episodes": rows}, pictures, summary)
    echo(f"results in {out_dir} ({EVAL}, {TRAJECTORIES}, {EPISODE}{', ' + TEST_SETS if len(sets) > 1 else ''})")
    return report


def plot_test_sets(rows: list[dict[str, Any]], policy: str, path: Path) -> Path:
    """An environment policy beside the central and decentralised planners, the rules where their rows are (idle
    UAVs home, the planner told the targets' motion) and nearest targets on every test set (grouped bars, the
    nominal set first), one panel per swarm size: each return as a share of the central planner's nominal return
    at that size."""
    methods = [policy, "scripted planner", "decentralised planner", "nearest target"]
    for extra in (TOLD_MOTION, IDLE_HOME):  # where their rows are: after the decentralised planner
        if any(r["method"] == extra for r in rows):
            methods.insert(3, extra)
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
