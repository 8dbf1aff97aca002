"""Reference policies for the UAV environment and the episode runner every policy is scored with.

- ``scripted_planner``: re-plans every step with a batched greedy assignment
  (the targets by value per travel of their ``need`` nearest free UAVs that
  can still reach them, as ``uavgnn.solvers.greedy`` does for one scene) and
  flies each assigned UAV straight at its target, slowing to stop inside the
  service radius on its side of the target (not on top of the others);
  unassigned UAVs hover. The bar learned policies are measured against.
- ``nearest_target``: every UAV at its nearest open target, flown the same
  way - what a policy that learned no coordination does.
- ``random_policy``: uniform actions, the floor.

A policy is a function ``(env) -> action`` that reads the env's tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from uavgnn.envs.uav_env import UAVEnv, approach_velocity

Policy = Callable[[UAVEnv], torch.Tensor]


def greedy_assignment(env: UAVEnv) -> torch.Tensor:
    """(E, N) target index each UAV is sent to (-1: none). Loops over targets (M rounds), batched over envs."""
    e, n, m = env.n_envs, env.n_uav, env.n_target
    dist = (env.target_pos[:, None] - env.pos[:, :, None]).norm(dim=-1)  # (E, N, M)
    reachable = dist <= env.energy[..., None]
    assignment = torch.full((e, n), -1, dtype=torch.long, device=env.device)
    open_ = env.visible().clone()
    need_max = env.dist.need_max
    ranks = torch.arange(need_max, device=env.device)
    for _ in range(m):
        free = assignment < 0
        d = dist.masked_fill(~(reachable & free[..., None]), float("inf"))
        nearest, who = d.topk(min(need_max, n), dim=1, largest=False)  # (E, need_max, M) nearest free UAVs
        taken = ranks[: nearest.shape[1], None] < env.need[:, None]  # (E, need_max, M) the need nearest count
        travel = torch.where(taken, nearest, torch.zeros_like(nearest)).sum(1)  # (E, M), inf if too few
        score = (env.value / travel.clamp(min=1e-9)).masked_fill(~open_ | ~torch.isfinite(travel), -1.0)
        score = score.masked_fill(env.value - env.dist.lam * travel <= 0, -1.0)
        best_score, best = score.max(1)  # (E,)
        go = best_score > 0
        chosen = who[torch.arange(e, device=env.device), :, best]  # (E, need_max)
        use = taken[torch.arange(e, device=env.device), :, best] & go[:, None]
        sent = torch.where(use, best[:, None], -1)  # the target of each chosen UAV, -1 where not sent
        update = torch.full_like(assignment, -1).scatter_reduce_(1, chosen, sent, "amax")
        assignment = torch.where(update >= 0, update, assignment)
        open_[torch.arange(e, device=env.device), best] &= ~go
    return assignment


def _to_action(env: UAVEnv, velocity: torch.Tensor) -> torch.Tensor:
    """The env action closest to a desired velocity (E, N, 2)."""
    if env.cfg.action == "continuous":
        return velocity / env.cfg.max_speed
    score = velocity @ env.headings.T  # the heading most aligned; stay when the command is (almost) zero
    score[..., 0] = 0.5 * velocity.norm(dim=-1) ** 2 / env.cfg.max_speed  # stay wins below half speed
    return score.argmax(-1)


def _goto_action(env: UAVEnv, assignment: torch.Tensor) -> torch.Tensor:
    """(E, N) goto action naming each UAV's assigned target among its candidates (0: hover, also when the
    target is not among its ``obs_targets`` nearest)."""
    _, j, present = env.candidates()
    match = (j == assignment[..., None]) & present  # (E, N, kt): at most one True per UAV
    rank = torch.arange(1, j.shape[-1] + 1, device=env.device)
    return (match * rank).amax(-1)


def scripted_planner(env: UAVEnv) -> torch.Tensor:
    assignment = greedy_assignment(env)
    if env.cfg.action == "goto":
        return _goto_action(env, assignment)
    goal = torch.gather(env.target_pos, 1, assignment.clamp(min=0)[..., None].expand(-1, -1, 2))
    velocity = approach_velocity(env.pos, goal, env.cfg) * (assignment >= 0)[..., None]
    return _to_action(env, velocity)


def nearest_target(env: UAVEnv) -> torch.Tensor:
    """Every UAV flies at its nearest open target, as the planner flies (no coordination, no range check)."""
    _, j, present = env.candidates()
    if env.cfg.action == "goto":
        return present[..., 0].long()
    goal = torch.gather(env.target_pos, 1, j[..., :1].expand(-1, -1, 2))
    return _to_action(env, approach_velocity(env.pos, goal, env.cfg) * present[..., :1])


def random_policy(env: UAVEnv, generator: torch.Generator | None = None) -> torch.Tensor:
    """Uniform actions, drawn from ``generator`` (the environment's own by default)."""
    generator = env.generator if generator is None else generator
    if env.cfg.action == "continuous":
        return torch.rand(env.n_envs, env.n_uav, 2, generator=generator, device=env.device) * 2 - 1
    return torch.randint(0, env.cfg.action_dim(), (env.n_envs, env.n_uav), generator=generator, device=env.device)


@dataclass
class EpisodeScores:
    """Per-episode results of ``run_episodes`` (one entry per environment)."""

    episode_return: torch.Tensor  # (E,) team task return
    completion: torch.Tensor  # (E,) share of targets completed
    collisions: torch.Tensor  # (E,) UAV-steps in a collision
    trajectory: torch.Tensor  # (T + 1, N, 2) positions of environment 0's episode, for pictures
    targets: torch.Tensor  # (M, 2) environment 0's target positions
    need: torch.Tensor  # (M,) their needs

    def summary(self) -> dict[str, float]:
        return {
            "return": self.episode_return.mean().item(),
            "return_std": self.episode_return.std().item(),
            "completion_rate": self.completion.mean().item(),
            "collisions": self.collisions.mean().item(),
        }


@torch.no_grad()
def run_episodes(env: UAVEnv, policy: Policy) -> EpisodeScores:
    """One full episode in every environment (from a reset); returns each episode's scores."""
    env.reset()
    targets, need = env.target_pos[0].cpu(), env.need[0].cpu()
    e = env.n_envs
    finished = torch.zeros(e, dtype=torch.bool, device=env.device)
    ret, completion, collisions = (torch.zeros(e, device=env.device) for _ in range(3))
    path = [env.pos[0].clone()]
    for _ in range(env.cfg.horizon):
        step = env.step(policy(env))
        live = ~finished
        collisions += step.collisions * live
        ret = torch.where(live & step.done, step.episode_return, ret)
        completion = torch.where(live & step.done, step.episode_completion, completion)
        if not finished[0]:
            path.append(step.positions[0].clone())
        finished |= step.done
    return EpisodeScores(ret, completion, collisions, torch.stack(path).cpu(), targets, need)
