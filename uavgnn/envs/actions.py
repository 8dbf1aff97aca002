"""What an action means in the UAV environment: the velocity it commands and which actions make sense now.

- continuous: a velocity in [-1, 1]^2 (times the top speed);
- discrete: stay, or one of 8 headings at the top speed;
- goto: stay, or fly at the k-th nearest open target (``fly_at``: how the scripted planners fly too); with
  ``goto_home`` a last action flies the UAV back to where it started.

``motion_travel``: what a UAV-target pair costs one told the targets' motion; ``told_travel`` that of every pair
of an environment, where anything is told (the planners, and with ``env.obs_motion_weight`` what a UAV observes).
"""

from __future__ import annotations

from typing import Protocol

import torch

from uavgnn.envs.settings import EnvSettings


class Acting(Protocol):
    """What an action's meaning reads of the environment (``UAVEnv``)."""

    cfg: EnvSettings
    n_envs: int
    n_uav: int
    side: float
    headings: torch.Tensor  # (A, 2) stay, then the 8 unit headings
    pos: torch.Tensor  # (E, N, 2)
    energy: torch.Tensor  # (E, N)
    target_pos: torch.Tensor  # (E, M, 2)
    target_vel: torch.Tensor  # (E, M, 2), only with settings.target_speed > 0
    home: torch.Tensor  # (E, N, 2) where each UAV started, only with settings.goto_home

    def candidates(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...


def check_mode(settings: EnvSettings) -> None:
    """A ``ValueError`` naming the setting, for an action mode this module does not know (before any state)."""
    if settings.action not in ("continuous", "discrete", "goto"):
        raise ValueError(f"env.action: unknown action mode {settings.action!r} (expected continuous, discrete or goto)")
    if settings.goto_home and settings.action != "goto":
        raise ValueError(f"env.goto_home: the home action is a goto action; env.action is {settings.action}")


def clamp_norm(v: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``v`` (..., 2) scaled down where its norm exceeds ``max_norm``: speed and acceleration limits."""
    norm = v.norm(dim=-1, keepdim=True)
    return v * (max_norm / norm.clamp(min=max_norm))


def approach_velocity(pos: torch.Tensor, goal: torch.Tensor, settings: EnvSettings) -> torch.Tensor:
    """(..., 2) velocity straight at ``goal``, slowing to stop 0.6 service radii short of it (on the UAV's side,
    not on top of the others serving it)."""
    offset = goal - pos
    distance = offset.norm(dim=-1, keepdim=True)
    speed = ((distance - 0.6 * settings.service_radius).clamp(min=0.0) / settings.dt).clamp(max=settings.max_speed)
    return offset / distance.clamp(min=1e-9) * speed


def meeting_time(pos: torch.Tensor, goal: torch.Tensor, goal_vel: torch.Tensor, max_speed: float) -> torch.Tensor:
    """(...) the earliest t with |goal + goal_vel t - pos| = max_speed t: when a UAV at ``pos`` flying straight at
    ``max_speed`` meets a target at ``goal`` moving at ``goal_vel`` (walls aside); 0 for a target as fast as the
    UAV or faster (not within float rounding of slower: t stays bounded)."""
    offset = goal - pos
    a = (goal_vel * goal_vel).sum(-1) - max_speed**2  # < 0: the UAV is faster
    b = 2 * (offset * goal_vel).sum(-1)
    c = (offset * offset).sum(-1)
    t = (-b - (b * b - 4 * a * c).clamp(min=0.0).sqrt()) / (2 * a).clamp(max=-1e-12)
    return torch.where(a < -1e-6 * max_speed**2, t, torch.zeros_like(t))


def motion_travel(
    pos: torch.Tensor, target_pos: torch.Tensor, target_vel: torch.Tensor, max_speed: float, motion_weight: float
) -> torch.Tensor:
    """(B, n, m) what each UAV-target pair costs a planner told the targets' motion (positions (B, n, 2) and (B, m,
    2), velocities (B, m, 2)): ``motion_weight`` of the straight flight to where they meet (``meeting_time``; the
    distance now where the target is too fast), the rest the distance now. Why a blend: the meeting flight alone
    puts a target fleeing at nearly the UAV's speed beyond its range and value (a tail chase closes at the speed
    difference), and the planner abandons it though the walls turn it back; the distance now alone misses that a
    target flying at a UAV comes to it. At rest both are the distance now."""
    uav, target = pos[:, :, None], target_pos[:, None]
    distance = (target - uav).norm(dim=-1)
    meet = meeting_time(uav, target, target_vel[:, None], max_speed)
    return torch.lerp(distance, torch.where(meet > 0, max_speed * meet, distance), motion_weight)


def told_travel(env: Acting, motion_weight: float) -> torch.Tensor | None:
    """(E, N, M) ``motion_travel`` of every UAV-target pair; None where nothing is told (a weight of 0, or
    targets that never move), so that callers keep the distance now without computing anything."""
    if motion_weight <= 0 or env.cfg.target_speed <= 0:
        return None
    return motion_travel(env.pos, env.target_pos, env.target_vel, env.cfg.max_speed, motion_weight)


def intercept_point(
    pos: torch.Tensor, goal: torch.Tensor, goal_vel: torch.Tensor, max_speed: float, side: float
) -> torch.Tensor:
    """(..., 2) where a UAV at ``pos`` meets a target at ``goal`` moving at ``goal_vel`` in the [0, side]^2 arena:
    the target's straight track at the ``meeting_time``, folded back by the walls as
    ``uavgnn.envs.disruptions.drift`` reflects it (the folded point is no farther from the UAV, so it is there by
    then). A target at rest, or one as fast as the UAV or faster, is flown at where it is."""
    t = meeting_time(pos, goal, goal_vel, max_speed)
    track = (goal + goal_vel * t[..., None]).remainder(2 * side)
    return torch.where(track > side, 2 * side - track, track)


def fly_at(env: Acting, target: torch.Tensor) -> torch.Tensor:
    """(E, N, 2) velocity of each UAV flying at its target, an (E, N) index (any valid one where it has none:
    the caller masks): straight at where it meets a moving target (``intercept_point``), stopping short of it
    (``approach_velocity``). How the ``goto`` actions and every scripted planner fly."""
    index = target[..., None].expand(-1, -1, 2)
    goal = torch.gather(env.target_pos, 1, index)
    if env.cfg.target_speed > 0:
        goal = intercept_point(env.pos, goal, torch.gather(env.target_vel, 1, index), env.cfg.max_speed, env.side)
    return approach_velocity(env.pos, goal, env.cfg)


def velocity_command(env: Acting, action: torch.Tensor) -> torch.Tensor:
    """(E, N, 2) desired velocity of an action: continuous (E, N, 2) in [-1, 1], discrete or goto (E, N)
    indices (goto: 0 hovers, k flies at the k-th nearest open target, an absent one hovers; the last, with
    ``goto_home``, flies back to where the UAV started, stopping as short of it as of a target)."""
    if env.cfg.action == "continuous":
        if action.shape != (env.n_envs, env.n_uav, 2):
            raise ValueError(
                f"continuous actions must have shape {(env.n_envs, env.n_uav, 2)}, got {tuple(action.shape)}"
            )
        return clamp_norm(action.clamp(-1.0, 1.0), 1.0) * env.cfg.max_speed
    if action.shape != (env.n_envs, env.n_uav):
        raise ValueError(
            f"{env.cfg.action} actions must have shape {(env.n_envs, env.n_uav)}, got {tuple(action.shape)}"
        )
    if env.cfg.action == "discrete":
        return env.headings[action] * env.cfg.max_speed
    _, j, present = env.candidates()
    k = (action - 1).clamp(0, j.shape[-1] - 1)[..., None]  # (E, N, 1)
    go = (action > 0) & (action <= j.shape[-1]) & present.gather(-1, k).squeeze(-1)
    velocity = fly_at(env, j.gather(-1, k).squeeze(-1)) * go[..., None]
    if env.cfg.goto_home:
        home = (action == env.cfg.home_action())[..., None]
        velocity = torch.where(home, approach_velocity(env.pos, env.home, env.cfg), velocity)
    return velocity


def available_actions(env: Acting) -> torch.Tensor:
    """(E, N, A) bool: the discrete actions that make sense now - stay always; a heading only for a UAV with
    energy left whose full-speed step along it stays inside the arena; a goto target only if it exists."""
    alive = (env.energy > 0)[..., None]
    if env.cfg.action == "goto":
        present = env.candidates()[2]
        pad = present.new_zeros(*present.shape[:2], env.cfg.obs_targets - present.shape[-1])
        home = [alive] if env.cfg.goto_home else []
        return torch.cat([torch.ones_like(present[..., :1]), present & alive, pad, *home], -1)
    ahead = env.pos[:, :, None] + env.headings * env.cfg.max_speed * env.cfg.dt  # (E, N, A, 2)
    inside = ((ahead >= 0) & (ahead <= env.side)).all(-1)
    avail = inside & alive
    avail[..., 0] = True
    return avail
