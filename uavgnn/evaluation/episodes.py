"""Scoring policies on the environment: the learned one against the scripted planner and random actions."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import torch

from uavgnn.envs.cbba import CBBAPlanner, HeardLinks
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

CBBA = "CBBA"
TEST_SEED = 3_000_017  # test episodes: fixed, disjoint from validation's
IDLE_HOME = "planner, idle home"  # the central planner sending idle UAVs home: a row only with env.goto_home
# the planners told the targets' velocities (``motion_travel``): rows only where targets move
TOLD_MOTION, LOCAL_TOLD_MOTION = "planner, told motion", "decentralised, told motion"
TOLD_MOTION_PLANNERS: dict[str, Policy] = {
    TOLD_MOTION: partial(scripted_planner, motion_weight=MOTION_WEIGHT),
    LOCAL_TOLD_MOTION: partial(decentralised_planner, motion_weight=MOTION_WEIGHT),
}


def compare_policies(
    policies: dict[str, Policy],
    settings: EnvSettings,
    dist: SceneDistribution,
    episodes: int,
    device: torch.device,
    seed: int = TEST_SEED,
) -> tuple[list[dict[str, Any]], dict[str, EpisodeScores]]:
    """Every policy (plus the scripted planner, central and decentralised, CBBA, the central planner sending idle
    UAVs home where they have that action, both planners told the targets' velocities where targets move, nearest
    targets and random actions) on the same ``episodes`` episodes: table rows (return mean and std, completion,
    collisions, share of the planner's return, time; for the policies and the decentralised planners and CBBA,
    which act on what their UAVs hear, rounds of messages and messages received per UAV per decision) and the
    scores."""
    told = TOLD_MOTION_PLANNERS if settings.target_speed > 0 else {}
    policies = {
        **{name: HeardLinks(policy) for name, policy in policies.items()},
        "scripted planner": scripted_planner,
        "decentralised planner": HeardLinks(decentralised_planner),
        CBBA: CBBAPlanner(),
        **({IDLE_HOME: planner_going_home} if settings.goto_home else {}),
        **{name: HeardLinks(told[name]) if name == LOCAL_TOLD_MOTION else told[name] for name in told},
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
            **_costs(policies[name]),
        }
        for name, summary in summaries.items()
    ]
    return rows, scores


def _costs(policy: Policy) -> dict[str, float]:
    """Rounds and messages per UAV per decision of a policy that counts them (none of the others)."""
    if isinstance(policy, CBBAPlanner | HeardLinks):
        return {k: round(v, 3) for k, v in policy.costs().items()}
    return {}
