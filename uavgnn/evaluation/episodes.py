"""Scoring policies on the environment: the learned one against the scripted planner and random actions."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import torch

from uavgnn.envs.policies import (
    MOTION_WEIGHT,
    EpisodeScores,
    Policy,
    decentralised_planner,
    nearest_target,
    planner_going_home,
    random_policy,
    run_episodes,
    scripted_planner,
)
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import make_env
from uavgnn.problem.scenes import SceneDistribution

TEST_SEED = 3_000_017  # test episodes: fixed, disjoint from validation's
VAL_SEED = 2_000_003  # validation episodes do not depend on the run's seed: every run is scored on the same ones
IDLE_HOME = "planner, idle home"  # the central planner sending idle UAVs home: a row only with env.goto_home
# the planners told the targets' velocities (``motion_travel``): rows only where targets move
TOLD_MOTION, LOCAL_TOLD_MOTION = "planner, told motion", "decentralised, told motion"
TOLD_MOTION_PLANNERS: dict[str, Policy] = {
    TOLD_MOTION: partial(scripted_planner, motion_weight=MOTION_WEIGHT),
    LOCAL_TOLD_MOTION: partial(decentralised_planner, motion_weight=MOTION_WEIGHT),
}


class PlannerValidation:
    """Fixed validation episodes scored against the scripted planner (its score and nearest targets' computed once):
    ``val/planner_gap = (planner - policy) / |planner|`` is what best.pt minimises for the RL algorithms."""

    def __init__(self, settings: EnvSettings, dist: SceneDistribution, episodes: int, device: torch.device) -> None:
        self.env = make_env(settings, dist, episodes, device, seed=VAL_SEED, count_key="env.val_episodes")
        self.references: dict[str, float] | None = None  # the planner's and nearest targets' returns

    def _return(self, policy: Policy) -> dict[str, float]:
        self.env.generator.manual_seed(VAL_SEED)
        return run_episodes(self.env, policy).summary()

    def __call__(self, policy: Policy) -> dict[str, float]:
        if self.references is None:
            self.references = {
                "val/planner_return": self._return(scripted_planner)["return"],
                "val/nearest_return": self._return(nearest_target)["return"],
            }
        scores = self._return(policy)
        planner = self.references["val/planner_return"]
        return {
            "val/return": scores["return"],
            "val/completion_rate": scores["completion_rate"],
            "val/collisions": scores["collisions"],
            **self.references,
            "val/planner_gap": (planner - scores["return"]) / max(abs(planner), 1e-9),
        }

    @staticmethod
    def describe(val: dict[str, float], best: float) -> str:
        return (
            f"val return {val['val/return']:.3f} (scripted planner {val['val/planner_return']:.3f}, "
            f"nearest target {val['val/nearest_return']:.3f}), "
            f"planner_gap {val['val/planner_gap']:.4f} (best {best:.4f}), "
            f"completion_rate {val['val/completion_rate']:.3f}"
        )


def compare_policies(
    policies: dict[str, Policy],
    settings: EnvSettings,
    dist: SceneDistribution,
    episodes: int,
    device: torch.device,
    seed: int = TEST_SEED,
) -> tuple[list[dict[str, Any]], dict[str, EpisodeScores]]:
    """Every policy (plus the scripted planner, central and decentralised, the central one sending idle UAVs home
    where they have that action, both told the targets' velocities where targets move, nearest targets and random
    actions) on the same ``episodes`` episodes: table rows (return mean and std, completion, collisions, share of
    the planner's return) and the scores."""
    policies = {
        **policies,
        "scripted planner": scripted_planner,
        "decentralised planner": decentralised_planner,
        **({IDLE_HOME: planner_going_home} if settings.goto_home else {}),
        **(TOLD_MOTION_PLANNERS if settings.target_speed > 0 else {}),
        "nearest target": nearest_target,
        "random": random_policy,
    }
    env = make_env(settings, dist, episodes, device, seed)
    scores: dict[str, EpisodeScores] = {}
    times: dict[str, float] = {}
    for name, policy in policies.items():
        env.generator.manual_seed(seed)  # the same episodes (and random draws) for every policy
        start = time.perf_counter()
        scores[name] = run_episodes(env, policy)
        times[name] = time.perf_counter() - start
    summaries = {name: s.summary() for name, s in scores.items()}
    planner = summaries["scripted planner"]["return"]
    rows = [
        {
            "method": name,
            **{k: round(v, 4) for k, v in summary.items()},
            "of_planner": round(summary["return"] / planner, 4) if planner else float("nan"),
            "time_s": round(times[name], 3),
        }
        for name, summary in summaries.items()
    ]
    return rows, scores
