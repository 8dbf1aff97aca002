"""``mode=eval ckpt=<an environment policy's best.pt>``: the policy on fixed test episodes.

The policy flies ``eval.episodes`` episodes of the environment and scenes it was trained in (the test seed:
disjoint from validation's, the same for every checkpoint), beside the scripted planner, nearest targets and
random actions on the same episodes: return (team and per UAV), its spread, completion, collisions and
``of_planner`` (the share of the planner's return), at the swarm size it was trained for and - a graph actor,
one set of weights for any number of UAVs - zero-shot at every ``eval.scales`` size (episodes per size:
``eval.max_total_uavs // n_uav`` at most). Writes ``eval.json``, ``trajectories.png`` (one episode by each
policy) and ``episode.gif``, and logs the table and the picture to the configured dashboard.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from uavgnn.algorithms.env_policy import EnvPolicy, load_env_policy
from uavgnn.config import Config
from uavgnn.console import echo
from uavgnn.envs.evaluation import TEST_SEED, compare_policies
from uavgnn.envs.render import episode_gif, plot_episodes
from uavgnn.loggers import publish
from uavgnn.report import count, format_table, write_json
from uavgnn.runtime import prepare_device
from uavgnn.settings import env_settings, scene_distribution

COLUMNS = [
    "n_uav",
    "method",
    "return",
    "return_std",
    "return_per_uav",
    "completion_rate",
    "collisions",
    "of_planner",
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


def run_env_eval(cfg: Config, out_dir: Path) -> dict[str, Any]:
    device = prepare_device(cfg)
    policy, config = load_env_policy(cfg.ckpt, "mode=eval ckpt", device)
    trained, dist = env_settings(config), scene_distribution(config)
    name, rows = config.algorithm.name, []
    for n_uav in swarm_sizes(cfg, config):
        settings = dataclasses.replace(trained, n_uav=n_uav)
        episodes = max(1, min(cfg.eval.episodes, cfg.eval.max_total_uavs // n_uav))
        size_rows, size_scores = compare_policies({name: policy}, settings, dist, episodes, device)
        for row in size_rows:
            row.update(n_uav=n_uav, return_per_uav=round(row["return"] / n_uav, 4))
        rows += size_rows
        echo(
            f"Test episodes: {count(episodes, 'episode')} of {count(n_uav, 'UAV')}, {settings.horizon} steps "
            f"({settings.name} environment, {dist.positions} scenes), {name} from {cfg.ckpt}"
            f"{'' if n_uav == trained.n_uav else ' (zero-shot: trained at ' + str(trained.n_uav) + ')'}\n"
            + format_table(size_rows, COLUMNS)
        )
        if n_uav == trained.n_uav:
            scores = size_scores
    echo("of_planner: the share of the scripted planner's return")
    plot_episodes(scores, trained.service_radius, out_dir / "trajectories.png")
    episode_gif(scores[name], trained.service_radius, out_dir / "episode.gif")
    report = {
        "checkpoint": str(cfg.ckpt),
        "algorithm": name,
        "n_uav": trained.n_uav,
        "horizon": trained.horizon,
        "episodes": cfg.eval.episodes,
        "seed": TEST_SEED,
        "rows": rows,
    }
    write_json(out_dir / "eval.json", report)
    summary = {
        f"eval/{key}" if row["n_uav"] == trained.n_uav else f"eval/n{row['n_uav']}/{key}": row[key]
        for row in rows
        if row["method"] == name
        for key in ("return", "of_planner", "completion_rate")
    }
    publish(cfg, out_dir, {"eval/episodes": rows}, {"eval/trajectories": out_dir / "trajectories.png"}, summary)
    echo(f"results in {out_dir} (eval.json, trajectories.png, episode.gif)")
    return report
