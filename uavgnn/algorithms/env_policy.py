"""What the environment policies' algorithms share: a policy of the multi-step UAV environment (``uavgnn.envs``).

- Validation: fixed episodes against the scripted planner (``PlannerValidation``); ``val/planner_gap``
  (minimised) selects ``best.pt``.
- Test phase: the best policy against the scripted planner (central and decentralised), nearest targets and random
  actions on fixed test episodes, with ``trajectories.png``, ``episode.gif`` and ``learning_curve.png``.
- Checkpoints are environment policies: ``load_env_policy`` plays one back (``algorithm.rollout_policy`` of
  the dynamics model, ``compare_checkpoints``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf
from torch import nn

from uavgnn.algorithms.base import Algorithm, Product, write_results
from uavgnn.algorithms.checkpoint_config import stored_config
from uavgnn.algorithms.registry import algorithms, describe, require
from uavgnn.config.settings import env_settings, loading, scene_distribution
from uavgnn.envs.policies import Policy
from uavgnn.envs.rl_workload import EnvRun
from uavgnn.envs.settings import EnvSettings
from uavgnn.evaluation.episodes import TEST_SEED, compare_policies
from uavgnn.infrastructure.console import count, echo
from uavgnn.infrastructure.errors import CheckpointError, ConfigError
from uavgnn.models.agent_stack import MLPConfig
from uavgnn.models.transformer_gnn import TransformerGNNConfig
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.reporting.episodes import episode_gif, plot_episodes, plot_learning_curve
from uavgnn.reporting.figures import SHARE, ZERO_UP, Compared, Curve, Score
from uavgnn.reporting.tables import format_table
from uavgnn.runs.checkpoints import load_checkpoint, load_weights
from uavgnn.runs.history import read_history
from uavgnn.runs.layout import EPISODE, LEARNING_CURVE, TRAJECTORIES

PRODUCT = Product(
    "environment policy", "mode=eval ckpt=, resume=auto hydra.run.dir=<its run> and algorithm.rollout_policy= take it"
)
# the networks of an environment policy: MLP actors, or one graph-Transformer actor for every UAV
AGENT_MODELS = {"mlp": MLPConfig, "transformer_gnn": TransformerGNNConfig}


class EnvPolicy(Algorithm):
    """The base of the algorithms that train a policy of the UAV environment."""

    produces = PRODUCT
    score = Score("val/planner_gap")
    reads = ("task", "env")
    compared = Compared(
        (
            Score("best_val_planner_gap", label="best val. gap to the planner", percent=True),
            Score("test/of_planner", minimize=False, label="test return / planner's", percent=True),
            Score("test/return", minimize=False, label="test return"),
            Score("test/completion_rate", minimize=False, label="test completion", percent=True, bounds=SHARE),
            Score("test/collisions", label="test collisions (UAV-steps)", bounds=ZERO_UP),
            Score("env_steps_per_s", minimize=False, label="env steps/s", bounds=ZERO_UP),
            Score("peak_mem_mb", label="peak memory (MB)", bounds=ZERO_UP),
        ),
        ("best_val_planner_gap", "test/of_planner", "test/return", "test/completion_rate"),
        Curve("val/return", "val return"),
        Curve("perf/env_steps_per_s", "env steps/s"),
    )

    @classmethod
    def check(cls, cfg: Any) -> None:
        if cfg.task.positions == "mixed":
            raise ConfigError(
                f"task=mixed with algorithm={cls.name}: the environment has one scene size and square "
                "for all its envs; use task=uniform or task=clustered"
            )
        if cfg.env.obs_links and (cls.is_mlp(cfg) or cfg.model.layers < 2):
            raise ConfigError(
                f"env.obs_links=true with model={cfg.model.name}"
                + ("" if cls.is_mlp(cfg) else f" model.layers={cfg.model.layers}")
                + ": a link (seen UAV -> seen target) reaches the UAV only through a graph actor's second layer; "
                "use a TransformerGNN size with model.layers>=2, or env.obs_links=false"
            )
        if cfg.env.obs_motion_weight > 0 and cfg.env.target_speed <= 0:
            raise ConfigError(
                f"env.obs_motion_weight={cfg.env.obs_motion_weight} with env.target_speed={cfg.env.target_speed}: it "
                "reckons seen targets' distances with their motion; it needs moving targets (env.target_speed > 0)"
            )
        if cfg.env.train_sizes and not cls.any_swarm_size(cfg):
            raise ConfigError(
                f"env.train_sizes={list(cfg.env.train_sizes)} with algorithm={cls.name}: training across swarm "
                "sizes takes on-policy episodes and networks of any number of UAVs: "
                + ", ".join(
                    f"algorithm={a.name} with {a.across_sizes}"
                    for a in algorithms().values()
                    if getattr(a, "across_sizes", None)
                )
            )

    def env_run(self) -> EnvRun:
        """What its workload reads of the run (the ``env``, ``task`` and ``hardware`` groups)."""
        cfg = self.cfg
        return EnvRun(
            env_settings(cfg),
            scene_distribution(cfg),
            cfg.seed,
            cfg.env.val_episodes,
            loading(cfg),
            tuple(cfg.env.train_sizes),
        )

    across_sizes: str | None = None  # what it takes to train across swarm sizes (env.train_sizes); None: it cannot

    @classmethod
    def any_swarm_size(cls, cfg: Any) -> bool:
        """Whether ``cfg`` trains it across swarm sizes (``across_sizes`` says what that takes): never by default."""
        return False

    @staticmethod
    def is_mlp(cfg: Any) -> bool:
        return OmegaConf.get_type(cfg.model) is MLPConfig

    def test(self, result: Any, out_dir: Path, logger: Any) -> float:
        """The best policy against the scripted planner and random actions on fixed test episodes, with pictures."""
        cfg, agents = self.cfg, result.model
        settings, dist = env_settings(cfg), scene_distribution(cfg)
        rows, scores = compare_policies({self.name: agents.play}, settings, dist, cfg.env.val_episodes, self.device)
        echo(
            f"\nTest episodes: {count(cfg.env.val_episodes, 'episode')} of {count(settings.n_uav, 'UAV')}, "
            f"{settings.horizon} steps ({cfg.task.positions})\n" + format_table(rows)
        )
        step = result.state.step
        logger.log_image(
            "test/trajectories", plot_episodes(scores, settings.service_radius, out_dir / TRAJECTORIES), step
        )
        episode_gif(scores[self.name], settings.service_radius, out_dir / EPISODE)
        logger.log_image(
            "train/learning_curve", plot_learning_curve(read_history(out_dir), out_dir / LEARNING_CURVE), step
        )
        test = {f"test/{key}": value for key, value in rows[0].items() if isinstance(value, float)}
        return write_results(result, out_dir, logger, rows, test)


def load_env_policy(path: str | Path, taker: str, device: torch.device | str = "cpu") -> tuple[Policy, Any]:
    """An environment policy's checkpoint as a policy (greedy actions, on ``device``) and its config on this
    version's schemas; ``taker`` names what asked (for the errors). Only the acting networks are loaded."""
    ckpt = load_checkpoint(path, device)
    algorithm = require(ckpt, path, PRODUCT, taker)
    config = stored_config(ckpt["config"])
    agents = algorithm.build_model(config).to(device)
    load_weights(*acting_part(agents, ckpt["policy"]), path, describe(ckpt["config"]))
    return agents.eval().play, config


def acting_part(agents: nn.Module, state: dict[str, Any]) -> tuple[nn.Module, dict[str, Any]]:
    """The networks ``agents.play`` reads (``agents.acting``: ``base.EnvAgents``), shared with ``agents``, and
    their weights in ``state``: a checkpoint whose critic a later version reshaped still plays (resuming it is
    refused), and no acting weight goes unloaded."""
    part = nn.Module()
    for name in agents.acting:
        setattr(part, name, getattr(agents, name))
    return part, {key: value for key, value in state.items() if key.split(".")[0] in agents.acting}


def compare_checkpoints(
    paths: list[str], episodes: int, horizon: int, device: torch.device, seed: int = TEST_SEED, n_uav: int | None = None
) -> list[dict[str, Any]]:
    """Environment policies, whatever their action mode, on the same scenes and horizon: each mode's
    checkpoints next to the scripted planners, nearest targets and random actions in that mode
    (``of_planner``: the share of that mode's planner). The checkpoints must share the UAV count and scenes;
    ``n_uav`` plays them on swarms of another size (graph actors only: one set of weights for any size)."""
    by_mode: dict[str, tuple[EnvSettings, SceneDistribution, dict[str, Policy]]] = {}
    first = None
    for path in paths:
        policy, config = load_env_policy(path, "compare_checkpoints")
        trained = env_settings(config)
        if n_uav not in (None, trained.n_uav) and EnvPolicy.is_mlp(config):
            raise CheckpointError(
                f"{path}: model=mlp flies the {trained.n_uav} UAVs it was trained for (its "
                f"networks are per agent or take agent ids), not {n_uav}"
            )
        settings = dataclasses.replace(trained, horizon=horizon, n_uav=n_uav or trained.n_uav)
        dist = scene_distribution(config)
        first = first or (path, settings.n_uav, dist)
        if (settings.n_uav, dist) != first[1:]:
            raise CheckpointError(
                f"{path}: trained on {settings.n_uav} UAVs of {dist}; {first[0]} on "
                f"{first[1]} UAVs of {first[2]}: not the same episodes"
            )
        label = f"{config.algorithm.name} seed {config.seed} ({Path(path).parent.name})"
        group = by_mode.setdefault(settings.action, (settings, dist, {}))
        sees, seen_by_group = settings.observation(), group[0].observation()
        if sees != seen_by_group:  # one environment observes for every policy of a group
            raise CheckpointError(
                f"{path}: its UAVs observe {sees}, not what the other {settings.action} checkpoints' UAVs observe "
                f"{seen_by_group}: score each with mode=eval (the same test episodes)"
            )
        group[2][label] = policy
    rows = []
    for mode, (settings, dist, policies) in by_mode.items():
        mode_rows, _ = compare_policies(policies, settings, dist, episodes, device, seed)
        rows += [
            {"method": row["method"], "actions": mode, **{k: v for k, v in row.items() if k != "method"}}
            for row in mode_rows
        ]
    return rows
