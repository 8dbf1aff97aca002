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
import time
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
PROBE_STEPS = 2  # steps of a test set's episodes its duration is estimated from
# every test set starts from no disruption, in every episode (whatever trained)
NOMINAL = {**{name: 0 for name in disruptions.FIELDS}, "disrupted_share": 1.0, "one_disruption": False}


def test_set_settings(trained: EnvSettings, n_uav: int, change: dict[str, Any]) -> EnvSettings:
    """The environment of a test set: the trained one at ``n_uav`` UAVs, from no disruption, with ``change``."""
    return dataclasses.replace(trained, n_uav=n_uav, **{**NOMINAL, **change})


def score_set(
    policy: Policy,
    name: str,
    settings: EnvSettings,
    dist: SceneDistribution,
    test_set: str,
    episodes: int,
    device: torch.device,
    nominal_return: float | None = None,
) -> tuple[list[dict[str, Any]], dict[str, EpisodeScores]]:
    """The rows of one test set (``test_set_settings``) and its recorded episodes (the pictures'); the nominal
    set gives ``nominal_return`` (the central planner's return there), the disrupted ones at its size take it."""
    rows, scores = compare_policies({name: policy}, settings, dist, episodes, device)
    if nominal_return is None:
        nominal_return = planner_return(rows)
    for row in rows:
        row.update(
            n_uav=settings.n_uav,
            test_set=test_set,
            return_per_uav=round(row["return"] / settings.n_uav, 4),
            of_nominal_planner=round(row["return"] / nominal_return, 4) if nominal_return else float("nan"),
        )
    return rows, scores


def planner_return(rows: list[dict[str, Any]]) -> float:
    """The central planner's return on a test set (its rows): what ``of_nominal_planner`` divides by."""
    return next(row["return"] for row in rows if row["method"] == "scripted planner")


def probe_seconds(
    policy: Policy,
    name: str,
    settings: EnvSettings,
    dist: SceneDistribution,
    episodes: int,
    device: torch.device,
    warm_up: bool,
) -> float:
    """Seconds a test set is expected to take: every method over the set's episodes for ``PROBE_STEPS`` steps
    (first for one step to warm up, with ``warm_up``: the first set of a size pays its one-off costs), times its
    horizon over them."""
    short = dataclasses.replace(settings, horizon=min(PROBE_STEPS, settings.horizon))
    if warm_up:
        compare_policies({name: policy}, dataclasses.replace(settings, horizon=1), dist, episodes, device)
    start = time.perf_counter()
    compare_policies({name: policy}, short, dist, episodes, device)
    return (time.perf_counter() - start) * settings.horizon / short.horizon


def compared_methods(rows: list[dict[str, Any]], policy: str) -> list[str]:
    """The methods a picture of the test sets shows, in order: the policy, the central and decentralised planners,
    CBBA, the rules where their rows are (the planner told the targets' motion, idle UAVs home), nearest targets."""
    methods = [policy, "scripted planner", "decentralised planner", CBBA, "nearest target"]
    for extra in (TOLD_MOTION, IDLE_HOME):  # where their rows are: after CBBA
        if any(r["method"] == extra for r in rows):
            methods.insert(4, extra)
    return methods
