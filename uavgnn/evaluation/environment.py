"""An environment policy on fixed test episodes at one swarm size, on every test set (``mode=eval``).

The policy flies the episodes of the environment and scenes it was trained in (the test seed: disjoint from
validation's, the same for every checkpoint), beside the scripted planners, nearest targets and random actions on
the same episodes: return (team and per UAV), its spread, completion, collisions and ``of_planner`` (the share of
the central planner's return on the same set), on the nominal test set (no disruption, whatever the policy trained
in) and each disrupted one (UAV failures, limited communication, moving targets; ``uavgnn.envs.disruptions``),
where ``of_nominal_planner`` is the share of the central planner's nominal return.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from uavgnn.envs import disruptions
from uavgnn.envs.policies import EpisodeScores, Policy
from uavgnn.envs.settings import EnvSettings
from uavgnn.evaluation.episodes import CBBA, IDLE_HOME, TOLD_MOTION, compare_policies
from uavgnn.problem.scenes import SceneDistribution

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
    "rounds",
    "messages_per_uav",
]
# every test set starts from no disruption, in every episode (whatever trained)
NOMINAL = {**{name: 0 for name in disruptions.FIELDS}, "disrupted_share": 1.0, "one_disruption": False}


def score_at_size(
    policy: Policy,
    name: str,
    trained: EnvSettings,
    dist: SceneDistribution,
    n_uav: int,
    test_sets: dict[str, dict[str, Any]],
    episodes: int,
    device: torch.device,
) -> tuple[list[dict[str, Any]], dict[str, EpisodeScores]]:
    """The rows of every test set (``{name: env fields changed}``, the nominal one first) at ``n_uav`` UAVs, and
    the nominal set's recorded episodes (its pictures)."""
    rows: list[dict[str, Any]] = []
    nominal, scores = None, {}
    for test_set, change in test_sets.items():
        settings = dataclasses.replace(trained, n_uav=n_uav, **{**NOMINAL, **change})
        set_rows, set_scores = compare_policies({name: policy}, settings, dist, episodes, device)
        if test_set == "nominal":
            nominal, scores = next(r["return"] for r in set_rows if r["method"] == "scripted planner"), set_scores
        for row in set_rows:
            row.update(
                n_uav=n_uav,
                test_set=test_set,
                return_per_uav=round(row["return"] / n_uav, 4),
                of_nominal_planner=round(row["return"] / nominal, 4) if nominal else float("nan"),
            )
        rows += set_rows
    return rows, scores


def compared_methods(rows: list[dict[str, Any]], policy: str) -> list[str]:
    """The methods a picture of the test sets shows, in order: the policy, the central and decentralised planners,
    CBBA, the rules where their rows are (the planner told the targets' motion, idle UAVs home), nearest targets."""
    methods = [policy, "scripted planner", "decentralised planner", CBBA, "nearest target"]
    for extra in (TOLD_MOTION, IDLE_HOME):  # where their rows are: after CBBA
        if any(r["method"] == extra for r in rows):
            methods.insert(4, extra)
    return methods
