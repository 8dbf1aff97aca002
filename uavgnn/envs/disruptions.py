"""Disruptions of the UAV environment: the world the scripted planner does not assume (``env`` settings, each off
by default, each drawn from the environment's seeded generator, so resumable with it).

- ``failures``: each UAV fails during an episode with this chance, at a uniform step in [1, horizon): it stops,
  serves and collides no more, and drops out of the others' observations (it falls silent).
- ``comm_radius``, ``comm_drop``: a UAV observes another only within the radius and when that step's message is not
  lost; what it does not hear is absent from its observation (neighbours, and the count of UAVs nearer to a target).
- ``target_speed``: every target drifts at this speed in its own uniform direction, reflected by the arena's walls.
- ``late_appear_steps``: targets appear over this many steps (the episode at most) instead of ``appear_steps``.
- ``disrupted_share``: below 1, each episode has the disruptions on with this chance (``calm`` the others), so that
  one policy trains for the nominal and the disrupted world at once.
- ``one_disruption``: each disrupted episode has one of the disruptions on, drawn uniformly (a radius and lost
  messages count as one: hearing), so that one policy trains for each world alone as it is tested.

Off, none of them draws a number or adds an operation: the seeded streams and results stay as they were.
"""

from __future__ import annotations

import torch

from uavgnn.envs.settings import EnvSettings

# the disruptions: off in the nominal test set
FIELDS = ("failures", "comm_radius", "comm_drop", "target_speed", "late_appear_steps")
# what one_disruption draws one of: the fields each kind of disruption turns on
KINDS = {
    "failures": ("failures",),
    "hearing": ("comm_radius", "comm_drop"),
    "moving": ("target_speed",),
    "late": ("late_appear_steps",),
}
# what a test set may change: a disruption, or when targets appear (the nominal set keeps the trained appear_steps)
SET_FIELDS = (*FIELDS, "appear_steps")
# mode=eval's disrupted test sets (eval.disruptions): the levels in BENCHMARKS.md's MARL table
TEST_SETS = {
    "failures": {"failures": 1.0},
    "comm_radius": {"comm_radius": 0.7},
    "comm_drop": {"comm_drop": 0.5},
    "moving_targets": {"target_speed": 0.26},
    "late_targets": {"late_appear_steps": 40},
}


def limits_hearing(settings: EnvSettings) -> bool:
    """Whether a UAV may not observe every other (a radius or lost messages; failures only silence the fallen)."""
    return settings.comm_radius > 0 or settings.comm_drop > 0


def kinds_on(settings: EnvSettings) -> list[str]:
    """The kinds of disruption on (``KINDS``)."""
    return [kind for kind, fields in KINDS.items() if any(getattr(settings, name) > 0 for name in fields)]


def mixed(settings: EnvSettings) -> bool:
    """Whether episodes differ in which disruptions are on (``calm_episodes``)."""
    kinds = kinds_on(settings)
    return bool(kinds) and (settings.disrupted_share < 1 or (settings.one_disruption and len(kinds) > 1))


def calm_episodes(
    settings: EnvSettings, drawn: dict[str, torch.Tensor], generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """Where episodes differ in their disruptions (``mixed``), what changes in a fresh episode's ``drawn`` state:
    ``calm`` (E,) bool, the episodes that hear every UAV (``UAVEnv.neighbours``), and in the episodes without each
    other disruption no failure, targets at rest, targets appearing over ``appear_steps``; nothing otherwise."""
    if not mixed(settings):
        return {}
    e, device, kinds = drawn["pos"].shape[0], generator.device, kinds_on(settings)
    calm = torch.rand(e, generator=generator, device=device) >= settings.disrupted_share
    if settings.one_disruption:
        kind = torch.randint(0, len(kinds), (e,), generator=generator, device=device)
        off = {name: calm | (kind != i) for i, name in enumerate(kinds)}
    else:
        off = dict.fromkeys(kinds, calm)
    changed = {"calm": off.get("hearing", calm)}
    if "fail_at" in drawn:
        changed["fail_at"] = drawn["fail_at"].masked_fill(off["failures"][:, None], settings.horizon)
    if "target_vel" in drawn:
        changed["target_vel"] = drawn["target_vel"].masked_fill(off["moving"][:, None, None], 0.0)
    if settings.late_appear_steps > 0:
        early = appear_at(settings.appear_steps, drawn["appear_at"].shape, generator)
        changed["appear_at"] = torch.where(off["late"][:, None], early, drawn["appear_at"])
    return changed


def appear_at(steps: int, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    """(E, M) the step at which each target appears: uniform in [0, steps) (0: all at the start)."""
    if steps <= 0:
        return torch.zeros(shape, dtype=torch.long, device=generator.device)
    return torch.randint(0, steps, shape, generator=generator, device=generator.device)


def failure_steps(settings: EnvSettings, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    """(E, N) the step at which each UAV fails: uniform in [1, horizon) with chance ``failures``, else horizon
    (never: an episode ends there)."""
    device = generator.device
    fails = torch.rand(shape, generator=generator, device=device) < settings.failures
    at = torch.randint(1, max(settings.horizon, 2), shape, generator=generator, device=device)
    return torch.where(fails, at, settings.horizon)


def drift_velocities(settings: EnvSettings, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    """(E, M, 2) each target's velocity: ``target_speed`` in a uniform direction."""
    angle = torch.rand(shape, generator=generator, device=generator.device) * 2 * torch.pi
    return settings.target_speed * torch.stack([angle.cos(), angle.sin()], -1)


def drift(pos: torch.Tensor, vel: torch.Tensor, side: float, dt: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Targets (E, M, 2) moved for ``dt``, reflected by the walls of the [0, side]^2 arena: (positions, velocities)."""
    moved = pos + vel * dt
    below, above = moved < 0, moved > side
    moved = torch.where(below, -moved, torch.where(above, 2 * side - moved, moved)).clamp(0.0, side)
    return moved, torch.where(below | above, -vel, vel)


def targets_rest(target_vel: torch.Tensor) -> torch.Tensor:
    """(E, 1) bool: the episodes whose targets do not move (``target_vel`` (E, M, 2) all zero), where going home
    and the collision hint pay (BENCHMARKS.md)."""
    return (target_vel == 0).all(-1).all(-1, keepdim=True)


def hinted_collisions(settings: EnvSettings, collided: torch.Tensor, target_vel: torch.Tensor | None) -> torch.Tensor:
    """(E, N) float: the collisions ``collision_hint`` charges - each UAV's ``collided`` (E, N), with
    ``collision_hint_at_rest`` only in the episodes whose targets rest (``target_vel`` (E, M, 2) all zero there;
    None: no target moves)."""
    hit = collided.float()
    if settings.collision_hint_at_rest and target_vel is not None:
        hit = hit * targets_rest(target_vel)
    return hit


def message_drops(settings: EnvSettings, shape: tuple[int, int, int], generator: torch.Generator) -> torch.Tensor:
    """(E, N, N) bool: the messages lost this step (UAV i does not hear UAV j)."""
    return torch.rand(shape, generator=generator, device=generator.device) < settings.comm_drop


def hearing(
    settings: EnvSettings,
    gap: torch.Tensor,
    down: torch.Tensor | None,
    dropped: torch.Tensor | None,
    calm: torch.Tensor | None = None,
) -> torch.Tensor:
    """(E, N, N) bool: UAV i hears (observes) UAV j, from their distances ``gap`` (E, N, N), the fallen UAVs
    ``down`` (E, N), the lost messages ``dropped`` (E, N, N) and the episodes whose hearing is not disrupted
    ``calm`` (E,), each None when that disruption (or the mix, ``mixed``) is off. A fallen UAV is silent even in an
    episode whose hearing is calm (with ``one_disruption``, a failures episode)."""
    heard = torch.ones_like(gap, dtype=torch.bool) if settings.comm_radius <= 0 else gap <= settings.comm_radius
    if dropped is not None:
        heard = heard & ~dropped
    if calm is not None:
        heard = heard | calm[:, None, None]
    return heard if down is None else heard & ~down[:, None, :]


def heard_ahead(distance: torch.Tensor, live: torch.Tensor, targets: torch.Tensor, heard: torch.Tensor) -> torch.Tensor:
    """(E, N, kt) how many UAVs that UAV i hears, with range left, are nearer than it to each of its targets
    ``targets`` (E, N, kt) (ties: lower index first), from the distances (E, N, M) and the UAVs with range
    ``live`` (E, N): ``UAVEnv.uavs_ahead`` restricted to what each UAV hears."""
    e, n, kt = targets.shape
    d = distance.masked_fill(~live[..., None], float("inf"))
    mine = torch.gather(d, 2, targets)  # (E, N, kt)
    theirs = torch.gather(d.transpose(1, 2), 1, targets.reshape(e, n * kt, 1).expand(-1, -1, n)).view(e, n, kt, n)
    index = torch.arange(n, device=distance.device)
    tie_first = index[None, :] < index[:, None]  # (N, N): j before i
    before = (theirs < mine[..., None]) | ((theirs == mine[..., None]) & tie_first[None, :, None, :])
    return (before & heard[:, :, None, :]).sum(-1)
