"""What an action means in the UAV environment: the velocity it commands and which actions make sense now.

- continuous: a velocity in [-1, 1]^2 (times the top speed);
- discrete: stay, or one of 8 headings at the top speed;
- goto: stay, or fly at the k-th nearest open target (``approach_velocity``: how the scripted planners fly too).
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

    def candidates(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...


def clamp_norm(v: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``v`` (..., 2) scaled down where its norm exceeds ``max_norm``: speed and acceleration limits."""
    norm = v.norm(dim=-1, keepdim=True)
    return v * (max_norm / norm.clamp(min=max_norm))


def approach_velocity(pos: torch.Tensor, goal: torch.Tensor, settings: EnvSettings) -> torch.Tensor:
    """(..., 2) velocity straight at ``goal``, slowing to stop 0.6 service radii short of it (on the UAV's side,
    not on top of the others serving it): how the scripted planner and the ``goto`` actions fly."""
    offset = goal - pos
    distance = offset.norm(dim=-1, keepdim=True)
    speed = ((distance - 0.6 * settings.service_radius).clamp(min=0.0) / settings.dt).clamp(max=settings.max_speed)
    return offset / distance.clamp(min=1e-9) * speed


def velocity_command(env: Acting, action: torch.Tensor) -> torch.Tensor:
    """(E, N, 2) desired velocity of an action: continuous (E, N, 2) in [-1, 1], discrete or goto (E, N)
    indices (goto: 0 hovers, k flies at the k-th nearest open target; an absent one hovers)."""
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
    goal = torch.gather(env.target_pos, 1, j.gather(-1, k).expand(-1, -1, 2))
    return approach_velocity(env.pos, goal, env.cfg) * go[..., None]


def available_actions(env: Acting) -> torch.Tensor:
    """(E, N, A) bool: the discrete actions that make sense now - stay always; a heading only for a UAV with
    energy left whose full-speed step along it stays inside the arena; a goto target only if it exists."""
    alive = (env.energy > 0)[..., None]
    if env.cfg.action == "goto":
        present = env.candidates()[2]
        pad = present.new_zeros(*present.shape[:2], env.cfg.obs_targets - present.shape[-1])
        return torch.cat([torch.ones_like(present[..., :1]), present & alive, pad], -1)
    ahead = env.pos[:, :, None] + env.headings * env.cfg.max_speed * env.cfg.dt  # (E, N, A, 2)
    inside = ((ahead >= 0) & (ahead <= env.side)).all(-1)
    avail = inside & alive
    avail[..., 0] = True
    return avail
