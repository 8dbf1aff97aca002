"""``mode=eval ckpt=<a MASAC or COMA best.pt>``: an environment policy on fixed test episodes.

The policy flies ``eval.episodes`` episodes of the environment and scenes it was trained in (the test seed:
disjoint from validation's, the same for every checkpoint), beside the scripted planner, nearest targets and
random actions on the same episodes: return (team and per UAV), its spread, completion, collisions and
``of_planner`` (the share of the planner's return). Its networks are per agent, so it is scored at the swarm
size it was trained for. Writes ``eval.json``, ``trajectories.png`` (one episode by each policy) and
``episode.gif``, and logs the table and the picture to the configured dashboard.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from uavgnn.algorithms.env_policy import load_env_policy
from uavgnn.config import Config
from uavgnn.console import echo
from uavgnn.envs.evaluation import TEST_SEED, compare_policies
from uavgnn.envs.render import episode_gif, plot_episodes
from uavgnn.envs.settings import EnvSettings
from uavgnn.loggers import publish
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.report import count, format_table, write_json
from uavgnn.runtime import prepare_device

COLUMNS = ["method", "return", "return_std", "return_per_uav", "completion_rate", "collisions", "of_planner",
           "time_s"]


def run_env_eval(cfg: Config, out_dir: Path) -> dict[str, Any]:
    device = prepare_device(cfg)
    policy, config = load_env_policy(cfg.ckpt, "mode=eval ckpt", device)
    settings, dist = EnvSettings.of(config.env), SceneDistribution.of(config.task)
    name = config.algorithm.name
    rows, scores = compare_policies({name: policy}, settings, dist, cfg.eval.episodes, device)
    for row in rows:
        row["return_per_uav"] = round(row["return"] / settings.n_uav, 4)
    echo(f"Test episodes: {count(cfg.eval.episodes, 'episode')} of {count(settings.n_uav, 'UAV')}, "
         f"{settings.horizon} steps ({settings.name} environment, {dist.positions} scenes), {name} from {cfg.ckpt}\n"
         + format_table(rows, COLUMNS) + "\nof_planner: the share of the scripted planner's return")
    plot_episodes(scores, settings.service_radius, out_dir / "trajectories.png")
    episode_gif(scores[name], settings.service_radius, out_dir / "episode.gif")
    report = {"checkpoint": str(cfg.ckpt), "algorithm": name, "n_uav": settings.n_uav, "horizon": settings.horizon,
              "episodes": cfg.eval.episodes, "seed": TEST_SEED, "rows": rows}
    write_json(out_dir / "eval.json", report)
    publish(cfg, out_dir, {"eval/episodes": rows}, {"eval/trajectories": out_dir / "trajectories.png"},
            {"eval/return": rows[0]["return"], "eval/of_planner": rows[0]["of_planner"],
             "eval/completion_rate": rows[0]["completion_rate"]})
    echo(f"results in {out_dir} (eval.json, trajectories.png, episode.gif)")
    return report
