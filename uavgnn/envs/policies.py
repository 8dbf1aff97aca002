"""Reference policies for the UAV environment and the episode runner every policy is scored with.

- ``scripted_planner``: re-plans every step with a batched greedy assignment
  (the targets by value per travel of their ``need`` nearest free UAVs that
  can still reach them, as ``uavgnn.solvers.greedy`` does for one scene) and
  flies each assigned UAV straight at its target (where it meets it, when
  targets move: ``uavgnn.envs.actions.fly_at``), slowing to stop inside the
  service radius on its side of the target (not on top of the others);
  unassigned UAVs hover. The bar learned policies are measured against. Its
  assignment assumes targets at rest (distances now, not at the meeting).
- ``decentralised_planner``: the same greedy assignment run by each UAV on
  what it observes (the UAVs it hears, its nearest open targets): the
  planner with what each UAV observes, the bar under disruptions.
- ``motion_weight`` (both planners; 0 by default): the planner told the
  targets' motion, costing each UAV-target pair partly by the flight to where
  they meet (``motion_travel``): a privileged reference, and a teacher.
- ``planner_going_home``: the central planner whose idle UAVs take the home action (``env.goto_home``): what
  that action is worth to a planner with a simple rule, beside what a policy learns to do with it.
- ``nearest_target``: every UAV at its nearest open target, flown the same
  way - what a policy that learned no coordination does.
- ``random_policy``: uniform actions, the floor.

A policy is a function ``(env) -> action`` that reads the env's tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from uavgnn.envs.actions import fly_at, told_travel
from uavgnn.envs.disruptions import targets_rest
from uavgnn.envs.uav_env import UAVEnv

Policy = Callable[[UAVEnv], torch.Tensor]

# The share of the flight to where they meet in what a pair costs a planner told the targets' motion (the rest: the
# distance now; ``motion_travel``). Chosen on the validation episodes of experiment=swarm_disrupted's environment at
# 16 UAVs among targets moving at 0.26, where it is 1.11x the central planner (0: 1.00x, 0.5: 1.10x, 1: 0.92x;
# ``benchmarks/privileged_planners.py --motion-weights``).
MOTION_WEIGHT = 0.25


def greedy_assignment(env: UAVEnv, motion_weight: float = 0.0) -> torch.Tensor:
    """(E, N) target index each UAV is sent to (-1: none): the central planner's, on everything the env knows
    (with ``motion_weight``, the targets' velocities too: ``motion_travel``)."""
    args = (env.target_pos, env.need, env.value, env.visible(), env.dist.lam, env.dist.need_max)
    return greedy_assign(env.pos, env.energy, *args, told_travel(env, motion_weight))


def greedy_assign(
    pos: torch.Tensor,
    energy: torch.Tensor,
    target_pos: torch.Tensor,
    need: torch.Tensor,
    value: torch.Tensor,
    open_: torch.Tensor,
    lam: float,
    need_max: int,
    pair_travel: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, n) target index each UAV is sent to (-1: none) in B problems of n UAVs (positions (B, n, 2), ranges)
    and m targets (positions (B, m, 2), needs, values, open (B, m)); ``pair_travel`` (B, n, m): what each UAV-target
    pair costs, if not the straight distance (a planner that knows more passes its own). Loops over targets (m
    rounds), batched."""
    dist = (target_pos[:, None] - pos[:, :, None]).norm(dim=-1) if pair_travel is None else pair_travel
    b, n = energy.shape
    reachable = dist <= energy[..., None]
    assignment = torch.full((b, n), -1, dtype=torch.long, device=energy.device)
    open_ = open_.clone()
    ranks = torch.arange(need_max, device=energy.device)
    rows = torch.arange(b, device=energy.device)
    for _ in range(open_.shape[1]):
        free = assignment < 0
        d = dist.masked_fill(~(reachable & free[..., None]), float("inf"))
        nearest, who = d.topk(min(need_max, n), dim=1, largest=False)  # (B, need_max, m) nearest free UAVs
        taken = ranks[: nearest.shape[1], None] < need[:, None]  # (B, need_max, m) the need nearest count
        travel = torch.where(taken, nearest, torch.zeros_like(nearest)).sum(1)  # (B, m), inf if too few
        too_few = need > nearest.shape[1]  # fewer UAVs than the need in the problem (n < need_max)
        score = (value / travel.clamp(min=1e-9)).masked_fill(~open_ | ~torch.isfinite(travel) | too_few, -1.0)
        score = score.masked_fill(value - lam * travel <= 0, -1.0)
        best_score, best = score.max(1)  # (B,)
        go = best_score > 0
        chosen = who[rows, :, best]  # (B, need_max)
        use = taken[rows, :, best] & go[:, None]
        sent = torch.where(use, best[:, None], -1)  # the target of each chosen UAV, -1 where not sent
        update = torch.full_like(assignment, -1).scatter_reduce_(1, chosen, sent, "amax")
        assignment = torch.where(update >= 0, update, assignment)
        open_[rows, best] &= ~go
    return assignment


def _to_action(env: UAVEnv, velocity: torch.Tensor) -> torch.Tensor:
    """The env action closest to a desired velocity (E, N, 2)."""
    if env.cfg.action == "continuous":
        return velocity / env.cfg.max_speed
    score = velocity @ env.headings.T  # the heading most aligned; stay when the command is (almost) zero
    score[..., 0] = 0.5 * velocity.norm(dim=-1) ** 2 / env.cfg.max_speed  # stay wins below half speed
    return score.argmax(-1)


def goto_action(env: UAVEnv, assignment: torch.Tensor) -> torch.Tensor:
    """(E, N) goto action naming each UAV's assigned target among its candidates (0: hover, also when the
    target is not among its ``obs_targets`` nearest)."""
    _, j, present = env.candidates()
    match = (j == assignment[..., None]) & present  # (E, N, kt): at most one True per UAV
    rank = torch.arange(1, j.shape[-1] + 1, device=env.device)
    return (match * rank).amax(-1)


def assignment_action(env: UAVEnv, assignment: torch.Tensor) -> torch.Tensor:
    """The actions that fly each UAV at its assigned target (E, N; -1: it hovers), as the planners fly."""
    if env.cfg.action == "goto":
        return goto_action(env, assignment)
    return _to_action(env, fly_at(env, assignment.clamp(min=0)) * (assignment >= 0)[..., None])


def scripted_planner(env: UAVEnv, motion_weight: float = 0.0) -> torch.Tensor:
    """The central planner's actions (``motion_weight``: told the targets' motion, ``motion_travel``)."""
    return assignment_action(env, greedy_assignment(env, motion_weight))


def decentralised_planner(env: UAVEnv, motion_weight: float = 0.0) -> torch.Tensor:
    """Each UAV runs the planner's greedy assignment on what it observes - itself and the UAVs it hears among its
    ``obs_uavs`` nearest (their positions and ranges), its ``obs_targets`` nearest open targets - and flies at the
    target it gave itself: the planner with what each UAV observes, plus the ranges of the UAVs it hears (which their
    messages would carry; the policies' observations hold their offsets and velocities, and the count of UAVs with
    range nearer to each target). ``motion_weight``: told the velocities of the targets it sees too (a policy
    observes them with ``env.obs_target_velocity``), costing pairs as the central planner told them does."""
    e, n = env.n_envs, env.n_uav
    _, j, open_ = env.candidates()  # (E, N, kt)
    i, heard, _ = env.neighbours()  # (E, N, ku)
    team = torch.cat([torch.arange(n, device=env.device).expand(e, n)[..., None], i], -1)  # (E, N, 1 + ku)
    present = torch.cat([heard.new_ones(e, n, 1), heard], -1)  # itself, then the UAVs it hears (none: one UAV)

    def seen(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:  # (E, K, ...) at (E, N, k) -> (E * N, k, ...)
        flat = index.flatten(1).view(e, -1, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:])
        return torch.gather(x, 1, flat).view(e * n, index.shape[-1], *x.shape[2:])

    energy = seen(env.energy, team).masked_fill(~present.flatten(0, 1), -1.0)  # an absent slot reaches nothing
    travel = told_travel(env, motion_weight)  # (E, N, M), then (E * N, 1 + ku, kt): the seen UAVs to the seen targets
    if travel is not None:
        travel = seen(travel, team).gather(-1, j.flatten(0, 1)[:, None].expand(-1, team.shape[-1], -1))
    local = greedy_assign(
        seen(env.pos, team),
        energy,
        seen(env.target_pos, j),
        seen(env.need, j),
        seen(env.value, j),
        open_.flatten(0, 1),
        env.dist.lam,
        env.dist.need_max,
        travel,
    )
    own = local[:, 0].view(e, n)  # the UAV's own target among its candidates (-1: none)
    if env.cfg.action == "goto":
        return own + 1
    goal = j.gather(-1, own.clamp(min=0)[..., None]).squeeze(-1)
    return _to_action(env, fly_at(env, goal) * (own >= 0)[..., None])


def planner_going_home(env: UAVEnv, at_rest: bool = False, planner: Policy = scripted_planner) -> torch.Tensor:
    """``planner``'s goto actions (the central planner's by default), where its UAVs with range and nothing to do
    fly back to where they started (``env.goto_home``): spread out again for targets still to appear. ``at_rest``:
    only in the episodes whose targets do not move (among moving targets going home costs more than it spreads:
    BENCHMARKS.md). The decentralised planner as ``planner``: the rule on a policy's information."""
    action = planner(env)
    idle = (action == 0) & (env.energy > 0)
    if at_rest and env.cfg.target_speed > 0:
        idle = idle & targets_rest(env.target_vel)
    return torch.where(idle, env.cfg.home_action(), action)


def nearest_target(env: UAVEnv) -> torch.Tensor:
    """Every UAV flies at its nearest open target, as the planner flies (no coordination, no range check)."""
    _, j, present = env.candidates()
    if env.cfg.action == "goto":
        return present[..., 0].long()
    return _to_action(env, fly_at(env, j[..., 0]) * present[..., :1])


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
    targets: torch.Tensor  # (T + 1, M, 2) its targets' positions at the same steps (they move with target_speed)
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
    need, e = env.need[0].cpu(), env.n_envs
    finished = torch.zeros(e, dtype=torch.bool, device=env.device)
    ret, completion, collisions = (torch.zeros(e, device=env.device) for _ in range(3))
    path, targets = [env.pos[0].clone()], [env.target_pos[0].clone()]
    for _ in range(env.cfg.horizon):
        step = env.step(policy(env))
        live = ~finished
        collisions += step.collisions * live
        ret = torch.where(live & step.done, step.episode_return, ret)
        completion = torch.where(live & step.done, step.episode_completion, completion)
        if not finished[0]:
            path.append(step.positions[0].clone())
            targets.append(step.target_positions[0].clone())
        finished |= step.done
    return EpisodeScores(ret, completion, collisions, torch.stack(path).cpu(), torch.stack(targets).cpu(), need)
