"""Scoring policies on the environment: the learned one against the scripted planner and random actions."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from uavgnn.envs.policies import (EpisodeScores, Policy, nearest_target, random_policy, run_episodes,
                                  scripted_planner)
from uavgnn.envs.uav_env import EnvSettings, UAVEnv
from uavgnn.errors import CheckpointError
from uavgnn.problem.scenes import SceneDistribution

TEST_SEED = 3_000_017  # test episodes: fixed, disjoint from validation's
VAL_SEED = 2_000_003  # validation episodes do not depend on the run's seed: every run is scored on the same ones


class PlannerValidation:
    """Fixed validation episodes scored against the scripted planner (its score and nearest targets' computed once):
    ``val/planner_gap = (planner - policy) / |planner|`` is what best.pt minimises for the RL algorithms."""

    def __init__(self, settings: EnvSettings, dist: SceneDistribution, episodes: int, device: torch.device) -> None:
        self.env = UAVEnv(settings, dist, episodes, device, seed=VAL_SEED, count_key="env.val_episodes")
        self.references: dict[str, float] | None = None  # the planner's and nearest targets' returns

    def _return(self, policy: Policy) -> dict[str, float]:
        self.env.generator.manual_seed(VAL_SEED)
        return run_episodes(self.env, policy).summary()

    def __call__(self, policy: Policy) -> dict[str, float]:
        if self.references is None:
            self.references = {"val/planner_return": self._return(scripted_planner)["return"],
                               "val/nearest_return": self._return(nearest_target)["return"]}
        scores = self._return(policy)
        planner = self.references["val/planner_return"]
        return {"val/return": scores["return"], "val/completion_rate": scores["completion_rate"],
                "val/collisions": scores["collisions"], **self.references,
                "val/planner_gap": (planner - scores["return"]) / max(abs(planner), 1e-9)}

    @staticmethod
    def describe(val: dict[str, float], best: float) -> str:
        return (f"val return {val['val/return']:.3f} (scripted planner {val['val/planner_return']:.3f}, "
                f"nearest target {val['val/nearest_return']:.3f}), "
                f"planner_gap {val['val/planner_gap']:.4f} (best {best:.4f}), "
                f"completion_rate {val['val/completion_rate']:.3f}")


def compare_policies(policies: dict[str, Policy], settings: EnvSettings, dist: SceneDistribution, episodes: int,
                     device: torch.device, seed: int = TEST_SEED) -> tuple[list[dict[str, Any]], dict[str, EpisodeScores]]:
    """Every policy (plus the scripted planner, nearest targets and random actions) on the same ``episodes`` episodes:
    table rows (return mean and std, completion, collisions, share of the planner's return) and the scores."""
    policies = {**policies, "scripted planner": scripted_planner, "nearest target": nearest_target,
                "random": random_policy}
    env = UAVEnv(settings, dist, episodes, device, seed)
    scores: dict[str, EpisodeScores] = {}
    times: dict[str, float] = {}
    for name, policy in policies.items():
        env.generator.manual_seed(seed)  # the same episodes (and random draws) for every policy
        start = time.perf_counter()
        scores[name] = run_episodes(env, policy)
        times[name] = time.perf_counter() - start
    summaries = {name: s.summary() for name, s in scores.items()}
    planner = summaries["scripted planner"]["return"]
    rows = [{"method": name, **{k: round(v, 4) for k, v in summary.items()},
             "of_planner": round(summary["return"] / planner, 4) if planner else float("nan"),
             "time_s": round(times[name], 3)} for name, summary in summaries.items()]
    return rows, scores


def load_policy(path: str | Path) -> tuple[Policy, Any]:
    """A MASAC or COMA checkpoint as an environment policy (greedy actions), and the config it was trained with
    (on the schema: keys added since it was saved take their defaults)."""
    from uavgnn.algorithms import make_model  # imported only when a checkpoint is asked for
    from uavgnn.config import Config
    from uavgnn.training.checkpoint import kind, load_checkpoint, load_weights, uses

    ckpt = load_checkpoint(path)
    config = OmegaConf.merge(OmegaConf.structured(Config), ckpt["config"])
    if config.algorithm.name not in ("masac", "coma"):
        raise CheckpointError(f"checkpoint {path} ({kind(ckpt['config'])}): an environment policy (algorithm=masac "
                              f"or coma) is needed here; this is {uses(ckpt['config'])}")
    agents = make_model(config)
    load_weights(agents, ckpt["policy"], path, ckpt["config"])
    return agents.play, config


def compare_checkpoints(paths: list[str], episodes: int, horizon: int, device: torch.device,
                        seed: int = TEST_SEED) -> list[dict[str, Any]]:
    """MASAC and COMA checkpoints, whatever their action mode, on the same scenes and horizon: each mode's
    checkpoints next to the scripted planner, nearest targets and random actions in that mode
    (``of_planner``: the share of that mode's planner). The checkpoints must share the UAV count and scenes."""
    from uavgnn.config import env_settings, scene_distribution

    by_mode: dict[str, tuple[EnvSettings, SceneDistribution, dict[str, Policy]]] = {}
    first = None
    for path in paths:
        policy, config = load_policy(path)
        settings = dataclasses.replace(env_settings(config.env), horizon=horizon)
        dist = scene_distribution(config.task)
        first = first or (path, settings.n_uav, dist)
        if (settings.n_uav, dist) != first[1:]:
            raise CheckpointError(f"{path}: trained on {settings.n_uav} UAVs of {dist}; {first[0]} on "
                                  f"{first[1]} UAVs of {first[2]}: not the same episodes")
        label = f"{config.algorithm.name} seed {config.seed} ({Path(path).parent.name})"
        by_mode.setdefault(settings.action, (settings, dist, {}))[2][label] = policy
    rows = []
    for mode, (settings, dist, policies) in by_mode.items():
        mode_rows, _ = compare_policies(policies, settings, dist, episodes, device, seed)
        rows += [{"method": row["method"], "actions": mode, **{k: v for k, v in row.items() if k != "method"}}
                 for row in mode_rows]
    return rows
