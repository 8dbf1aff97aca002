"""MAPPO's on-policy collections (``algorithm=mappo``): each step's log-probability and value under the collecting
policy, the teacher's action where it imitates the planner, and the advantages (GAE) of the whole collection."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from uavgnn.algorithms.rl_math import gae
from uavgnn.envs.on_policy import Episodes, EpisodeWorkload
from uavgnn.envs.policies import planner_going_home, scripted_planner
from uavgnn.envs.rl_workload import EnvRun
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.infrastructure.device import unwrap


@dataclass
class Rollouts(Episodes):
    """On-policy episodes with what the collecting policy saw of them (``action``: u for continuous actions)."""

    logp: torch.Tensor  # (B, T, N) log-probability of the action under the collecting policy
    value: torch.Tensor  # (B, T, N) its value estimate, denormalised
    advantage: torch.Tensor  # (B, T, N) GAE
    returns: torch.Tensor  # (B, T, N) lambda-returns: the critic's targets


@dataclass(frozen=True)
class Teacher:
    """The imitation of the central planner (``algorithm.teacher``): its loss's first weight, the updates that
    weight falls to 0 over, whether the planner's idle UAVs fly home (everywhere, or where targets rest), and the
    share of the meeting flight in what a pair costs it (``algorithm.teacher_motion_weight``; 0: it assumes targets
    at rest, as the central planner does)."""

    coef: float
    updates: int
    idle_home: bool = False
    at_rest: bool = False
    motion_weight: float = 0.0


def planner_teaching(env: UAVEnv, action: torch.Tensor, teacher: Teacher) -> torch.Tensor:
    """(E, N) the central planner's actions, to imitate (told the targets' motion with ``teacher.motion_weight``).
    ``teacher.idle_home``: its idle UAVs fly home (``planner_going_home``, ``teacher=planner_home``; with
    ``at_rest`` only where the targets do not move, ``teacher=planner_home_at_rest``). Otherwise it has no home
    action (``env.goto_home``), so where it hovers, a UAV whose ``action`` went home agrees with it: imitation
    teaches where to fly, and leaves waiting or going home to PPO (imitating the hover would teach never to go
    home)."""
    planner = partial(scripted_planner, motion_weight=teacher.motion_weight)
    if teacher.idle_home:
        return planner_going_home(env, teacher.at_rest, planner)
    taught = planner(env)
    if not env.cfg.goto_home:
        return taught
    return torch.where((taught == 0) & (action == env.cfg.home_action()), action, taught)


@dataclass
class TaughtRollouts(Rollouts):
    """Rollouts with the teacher's actions (``teacher=planner``)."""

    teacher_action: torch.Tensor  # (B, T, N) the central planner's action at each step
    teacher_weight: torch.Tensor  # (B,) the imitation loss's weight when the episode was collected


class MAPPOWorkload(EpisodeWorkload):
    """On-policy episodes that keep each step's log-probability and value, and their advantages."""

    episodes_type = Rollouts

    def __init__(
        self,
        run: EnvRun,
        model: nn.Module,
        device: torch.device,
        batch_size: int,
        minibatches: int,
        gamma: float,
        gae_lambda: float,
        teacher: Teacher | None = None,
    ) -> None:
        """``teacher``: the planner imitated on the collected steps, or None."""
        super().__init__(run, model, device, batch_size, minibatches)
        self.gamma, self.gae_lambda, self.teacher = gamma, gae_lambda, teacher
        self.taught = 0.0  # the imitation loss's weight on the current collection (``collect``)
        if teacher is not None:
            self.episodes_type = TaughtRollouts

    def act(
        self, obs: torch.Tensor, state: torch.Tensor, avail: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        agents = unwrap(self.model)
        action, logp = agents.sample(obs, avail, self.env.generator)
        columns = {"action": action, "logp": logp, "value": agents.value(state, obs)}
        if self.teacher is not None:  # the planner asked while its word weighs anything (static columns after)
            columns["teacher_action"] = (
                planner_teaching(self.env, action, self.teacher) if self.taught > 0 else torch.zeros_like(action)
            )
        return agents.to_env(action), columns

    def collect(self, step: int) -> None:
        if self.teacher is not None:  # the imitation loss's weight on this collection: it falls with the step
            self.taught = self.teacher.coef * max(0.0, 1.0 - step / self.teacher.updates)
        super().collect(step)

    def finish(self, columns: dict[str, torch.Tensor]) -> Rollouts:
        """GAE and the lambda-returns of the collection; the value normaliser then moves toward the returns."""
        agents = unwrap(self.model)
        mean, std = agents.return_scale()
        value = columns.pop("value") * std + mean
        advantage, returns = gae(columns["reward"], columns["done"], value, self.gamma, self.gae_lambda)
        agents.observe_returns(returns, columns["mask"])
        if self.teacher is None:
            return Rollouts(**columns, value=value, advantage=advantage, returns=returns)
        taught = torch.full_like(value[:, 0, 0], self.taught)
        return TaughtRollouts(**columns, value=value, advantage=advantage, returns=returns, teacher_weight=taught)
