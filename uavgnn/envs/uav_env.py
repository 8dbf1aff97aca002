"""A multi-step version of the assignment problem, batched over E environments and N UAVs on any device.

Each environment is a scene (``generate_scene_batch``: the ``task`` group's distribution) that plays out over
``horizon`` steps. UAVs fly with bounded speed and acceleration and spend their range (energy) on every unit
travelled; a UAV with no energy left is grounded. A target is completed - and pays its value once - when at least
``need`` UAVs are within ``service_radius`` of it at the same step. Targets may appear over time (``appear_steps``).
An episode ends at the horizon or when every target is completed; ended environments reset in place with a fresh
scene (``auto_reset``, static shapes: no host sync, no per-env branch).

Hidden disturbances (``wind``, ``drag``; off by default): each episode draws an unobserved constant wind
acceleration (magnitude uniform in [0, wind], uniform direction) and each UAV a linear drag coefficient in [0,
drag]; a step's disturbance acceleration is ``wind - drag * velocity``. Policies never see them; they are the
implicit state the dynamics model (``algorithm=dynamics``) must infer from noisy positions and the commands.

Disruptions (``failures``, ``comm_radius``, ``comm_drop``, ``target_speed``; off by default,
``uavgnn.envs.disruptions``): UAVs that fail and fall silent, observations limited to the UAVs a UAV hears, targets
that drift - the world the scripted planner does not assume.

Reward of UAV i at a step (``task_reward``, what returns are measured in):
  share of completed values (value / UAVs in the radius, for each target it helped complete)
  - lam * distance travelled - collision_penalty [closer than collision_radius to another UAV]
  - exhausted_penalty [its energy ran out this step].
The training reward adds ``approach_reward`` * (progress towards the nearest open target), a potential-based hint
(it sums to the same value over every episode from one start, so the best policy is unchanged); and mixes in the
team: ``(1 - team_weight) r_i + team_weight * mean_j r_j``; less ``collision_hint`` for a UAV in a collision,
its own (in the team's mean a collision reaches each UAV divided by the swarm size; with ``collision_hint_at_rest``
only where targets rest).

Everything is tensor algebra over (E, N, M): no Python loop over environments or UAVs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from uavgnn.envs import actions, disruptions
from uavgnn.envs.actions import clamp_norm
from uavgnn.envs.saved_state import check_tensors
from uavgnn.envs.settings import HEADINGS, EnvSettings
from uavgnn.infrastructure.errors import ConfigError, MemoryBudgetError
from uavgnn.infrastructure.memory import check_fits
from uavgnn.infrastructure.randomness import restore_stream
from uavgnn.infrastructure.user_code import import_named
from uavgnn.problem.observation import NEIGHBOUR_FEATURES
from uavgnn.problem.scene_batch import generate_scene_batch
from uavgnn.problem.scenes import SceneDistribution


@dataclass
class Step:
    """What one ``UAVEnv.step`` returns. ``obs`` and ``state`` are what the policy acts on next: after the
    auto-reset where an episode ended, so a transition stores them as its next observation only to bootstrap where
    it is not done - time left is observed, so the horizon is a true end and a done transition has no next value.
    The final observation of an ended episode is what an environment without ``auto_reset`` returns."""

    obs: torch.Tensor  # (E, N, obs_dim)
    state: torch.Tensor  # (E, state_dim)
    reward: torch.Tensor  # (E, N) training reward
    task_reward: torch.Tensor  # (E, N) the task's reward (no hint, no team mixing)
    done: torch.Tensor  # (E,) bool: the episode ended at this step
    completed: torch.Tensor  # (E,) targets completed at this step
    collisions: torch.Tensor  # (E,) UAVs in a collision at this step
    episode_return: torch.Tensor  # (E,) team task return of the episode so far (final where done)
    agent_return: torch.Tensor  # (E, N) each UAV's task return of the episode so far
    episode_completion: torch.Tensor  # (E,) share of the episode's targets completed so far
    positions: torch.Tensor  # (E, N, 2) UAV positions at the end of the step (before the auto-reset)
    target_positions: torch.Tensor  # (E, M, 2) target positions at the end of the step (they move with target_speed)
    accel: torch.Tensor  # (E, N, 2) the commanded acceleration this step applied (before the disturbance)
    disturbance: torch.Tensor  # (E, N, 2) the hidden disturbance acceleration of this step


class UAVEnv:
    """E environments of N UAVs stepped at once; seeded by ``seed``, resumable through ``state_dict``."""

    def __init__(
        self,
        settings: EnvSettings,
        dist: SceneDistribution,
        n_envs: int,
        device: torch.device,
        seed: int,
        count_key: str = "env.n_envs",
        auto_reset: bool = True,
    ) -> None:
        """``count_key``: the setting ``n_envs`` came from, named if the environments cannot fit in memory;
        ``auto_reset``: an ended episode starts afresh inside ``step`` (else it stays ended until ``reset``)."""
        actions.check_mode(settings)
        check_fits(
            f"{count_key}={n_envs}: {n_envs:,} environments of {settings.n_uav} UAVs",
            n_envs * settings.bytes_per_env(dist),
            f"lower {count_key}",
            device,
        )
        self.cfg, self.dist, self.n_envs, self.device = settings, dist, n_envs, torch.device(device)
        self.auto_reset = auto_reset
        self.n_uav, self.n_target = settings.n_uav, settings.n_targets(dist)
        self.side = dist.side(settings.n_uav)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.headings = HEADINGS.to(self.device)
        fresh = self._draw()  # the state tensors, all (E, ...)
        self._names = tuple(fresh)
        self.__dict__.update(fresh)

    # -- scenes ------------------------------------------------------------------------------------------------

    def _draw(self) -> dict[str, torch.Tensor]:
        """A fresh episode in every environment."""
        drawn, constant = self._fresh()
        e, n, m, dev = self.n_envs, self.n_uav, self.n_target, self.device
        shapes = {
            "vel": (e, n, 2),
            "open": (e, m),
            "t": (e,),
            "ret": (e, n),
            "n_completed": (e,),
            "appear_at": (e, m),
            "wind": (e, 2),
            "drag": (e, n),
        }
        dtypes = {"open": torch.bool, "t": torch.long, "appear_at": torch.long}
        fresh = {
            **drawn,
            **{
                name: torch.full(shapes[name], value, dtype=dtypes.get(name, torch.float32), device=dev)
                for name, value in constant.items()
            },
        }
        if self.cfg.comm_drop > 0:  # redrawn every step (``step``): state, so that a resumed run hears the same
            fresh["dropped"] = disruptions.message_drops(self.cfg, (e, n, n), self.generator)
        return fresh

    def _fresh(self) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """A fresh episode's state: the tensors drawn at random (E, ...), and the values the rest of the state
        starts at (a scalar each: an auto-reset fills them in, no tensor of them is made each step). The hidden
        wind (E, 2) and drag (E, N) are drawn only when on (seeded streams stay as they were)."""
        e, n, m, dev, cfg = self.n_envs, self.n_uav, self.n_target, self.device, self.cfg
        scenes = generate_scene_batch(self.dist, n, e, self.generator, dev)
        drawn = {
            "pos": scenes.uav_pos,
            "energy": scenes.uav_range,
            "target_pos": scenes.target_pos,
            "need": scenes.need,
            "value": scenes.value,
        }
        constant = {
            "vel": 0.0,
            "open": True,
            "t": 0,
            "ret": 0.0,
            "n_completed": 0.0,
            "appear_at": 0,
            "wind": 0.0,
            "drag": 0.0,
        }
        if cfg.appear_steps > 0 or cfg.late_appear_steps > 0:
            steps = min(cfg.late_appear_steps, cfg.horizon) or cfg.appear_steps  # late: within the episode
            drawn["appear_at"] = disruptions.appear_at(int(steps), (e, m), self.generator)
        if cfg.wind > 0:
            angle = torch.rand(e, generator=self.generator, device=dev) * 2 * torch.pi
            drawn["wind"] = (
                cfg.wind
                * torch.rand(e, 1, generator=self.generator, device=dev)
                * torch.stack([angle.cos(), angle.sin()], -1)
            )
        if cfg.drag > 0:
            drawn["drag"] = cfg.drag * torch.rand(e, n, generator=self.generator, device=dev)
        if cfg.goto_home:  # where each UAV started: where its home action flies it back to
            drawn["home"] = scenes.uav_pos.clone()
        if cfg.failures > 0:  # the disruptions' state exists only when they are on
            drawn["fail_at"] = disruptions.failure_steps(cfg, (e, n), self.generator)
        if cfg.target_speed > 0:
            drawn["target_vel"] = disruptions.drift_velocities(cfg, (e, m), self.generator)
        drawn.update(disruptions.calm_episodes(cfg, drawn, self.generator))  # the nominal share of the episodes
        return drawn, {name: value for name, value in constant.items() if name not in drawn}

    def reset(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Fresh episodes everywhere: (obs (E, N, obs_dim), state (E, state_dim))."""
        self.__dict__.update(self._draw())
        return self.observe(), self.global_state()

    def _reset_where(self, done: torch.Tensor) -> None:
        drawn, constant = self._fresh()
        masks = {1: done}  # done (E,) viewed to broadcast over a state tensor of each rank, once a rank

        def mask(rank: int) -> torch.Tensor:
            if rank not in masks:
                masks[rank] = done.view(-1, *([1] * (rank - 1)))
            return masks[rank]

        for name, value in drawn.items():
            setattr(self, name, torch.where(mask(value.dim()), value, getattr(self, name)))
        for name, value in constant.items():
            current = getattr(self, name)
            setattr(self, name, current.masked_fill(mask(current.dim()), value))

    # -- observations --------------------------------------------------------------------------------------------

    def visible(self) -> torch.Tensor:
        """(E, M) targets that are open and have appeared."""
        return self.open & (self.appear_at <= self.t[:, None])

    def candidates(self, distance: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each UAV's ``obs_targets`` nearest visible open targets (with ``reachable_targets``: within its range
        left), nearest first (what it observes and what the ``goto`` actions 1.. name): distances and target indices
        (E, N, kt), and which of those exist (bool); ``distance``: ``target_distance()`` when the caller has it."""
        d = self.target_distance() if distance is None else distance
        unseen = ~self.visible()[:, None]  # not candidates, and with reachable_targets those out of range
        dist_t = d.masked_fill(
            unseen | (d > self.energy[..., None]) if self.cfg.reachable_targets else unseen, float("inf")
        )
        d, j = dist_t.topk(min(self.cfg.obs_targets, self.n_target), dim=-1, largest=False)
        return d, j, torch.isfinite(d)

    def observe(self) -> torch.Tensor:
        """Per-UAV fixed-size observation (E, N, obs_dim): itself (velocity, range, time left, position, the way
        home with ``goto_home``), its nearest open targets (offset, distance, need, value, UAVs nearer to it, velocity
        with ``obs_target_velocity``, present; with ``obs_motion_weight`` the distance and who is nearer as the
        planner told the targets' motion costs the pairs) and UAVs (offset, relative velocity, present); with a
        disruption on, only the UAVs it hears (``neighbours``)."""
        cfg, speed = self.cfg, self.cfg.max_speed
        unit = self.side if cfg.obs_scale == "side" else self.dist.range_max  # of offsets and distances
        time_left = (1.0 - self.t.float() / cfg.horizon)[:, None, None].expand(-1, self.n_uav, 1)
        home = [(self.home - self.pos) / unit] if cfg.goto_home else []
        own = torch.cat(
            [self.vel / speed, self.energy[..., None] / self.dist.range_max, time_left, self.pos / self.side, *home], -1
        )
        rel_t = self.target_pos[:, None] - self.pos[:, :, None]  # (E, N, M, 2)
        distance = rel_t.norm(dim=-1)  # (E, N, M)
        d, j, present = self.candidates(distance)
        travel = actions.told_travel(self, cfg.obs_motion_weight)  # what a pair costs the planner told the motion
        if travel is not None:
            distance, d = travel, torch.gather(travel, 2, j)

        def gather(x: torch.Tensor) -> torch.Tensor:  # (E, M) -> (E, N, kt): the targets each UAV sees
            return torch.gather(x[:, None].expand(-1, self.n_uav, -1), 2, j)

        rel_u = self.pos[:, None] - self.pos[:, :, None]  # (E, N, N, 2): other minus me
        i, heard_uavs, heard = self.neighbours(rel_u)
        if heard is not None and disruptions.limits_hearing(cfg):
            ahead = disruptions.heard_ahead(distance, self.energy > 0, j, heard)
        else:
            ahead = torch.gather(self.uavs_ahead(distance), 2, j)
        ahead = ahead.clamp(max=self.dist.need_max)
        moving = (  # the targets' velocities, observed with obs_target_velocity (zero where none moves)
            ()
            if not cfg.obs_target_velocity
            else self.target_vel.unbind(-1)
            if cfg.target_speed > 0
            else (torch.zeros_like(self.value),) * 2
        )
        targets = torch.stack(
            [
                *(torch.gather(rel_t, 2, j[..., None].expand(-1, -1, -1, 2)) / unit).unbind(-1),
                d.nan_to_num(posinf=0.0) / unit,
                gather(self.need).float() / self.dist.need_max,
                gather(self.value) / (self.dist.value_max * self.dist.need_max),
                ahead.float() / self.dist.need_max,
                *[gather(v) / speed for v in moving],
            ],
            -1,
        )
        targets = torch.cat([targets * present[..., None], present[..., None].float()], -1)
        rel_v = self.vel[:, None] - self.vel[:, :, None]
        idx = i[..., None].expand(-1, -1, -1, 2)
        present = torch.ones_like(i[..., None], dtype=own.dtype) if heard is None else heard_uavs[..., None].float()
        neighbours = torch.cat([torch.gather(rel_u, 2, idx) / unit, torch.gather(rel_v, 2, idx) / speed, present], -1)
        if heard is not None:
            neighbours = neighbours * present
        return torch.cat(
            [
                own,
                targets.flatten(2),
                own.new_zeros(*own.shape[:2], targets.shape[-1] * (cfg.obs_targets - j.shape[-1])),  # empty slots
                neighbours.flatten(2),
                own.new_zeros(*own.shape[:2], NEIGHBOUR_FEATURES * (cfg.obs_uavs - i.shape[-1])),
            ],
            -1,
        )

    def down(self) -> torch.Tensor | None:
        """(E, N) bool: the UAVs that have failed (None: ``failures`` off)."""
        return self.t[:, None] >= self.fail_at if self.cfg.failures > 0 else None

    def neighbours(self, rel_u: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Each UAV's ``obs_uavs`` nearest UAVs that it hears, nearest first: indices (E, N, ku), which of them
        exist (bool), and who hears whom (E, N, N; None: every UAV hears every other, with no disruption on);
        ``rel_u``: the UAVs' offsets (E, N, N, 2) when the caller has them already."""
        rel_u = self.pos[:, None] - self.pos[:, :, None] if rel_u is None else rel_u
        gap = rel_u.norm(dim=-1)
        heard = None
        if self.cfg.failures > 0 or disruptions.limits_hearing(self.cfg):
            dropped = self.dropped if self.cfg.comm_drop > 0 else None
            calm = self.calm if "calm" in self._names else None  # mixed episodes: a calm one hears every UAV
            heard = disruptions.hearing(self.cfg, gap, self.down(), dropped, calm)
            gap = gap.masked_fill(~heard, float("inf"))
        gap = gap + torch.diag(torch.full((self.n_uav,), float("inf"), device=self.device))
        d, i = gap.topk(min(self.cfg.obs_uavs, self.n_uav - 1), dim=-1, largest=False)
        return i, torch.isfinite(d), heard

    def uavs_ahead(self, distance: torch.Tensor) -> torch.Tensor:
        """(E, N, M) how many other UAVs with range left are nearer to each target than this UAV (ties: lower
        index first; a grounded UAV is behind every UAV with range): with the target's need, it tells a UAV whether
        it is among the ones that should serve it."""
        live = distance.masked_fill((self.energy <= 0)[..., None], float("inf"))
        return live.argsort(dim=1, stable=True).argsort(dim=1, stable=True)

    def global_state(self) -> torch.Tensor:
        """The centralised critic's input (E, state_dim): every UAV and target, absolute, plus time."""
        uavs = torch.cat(
            [self.pos / self.side, self.vel / self.cfg.max_speed, self.energy[..., None] / self.dist.range_max], -1
        )
        targets = torch.cat(
            [
                self.target_pos / self.side,
                self.need[..., None].float() / self.dist.need_max,
                self.value[..., None] / (self.dist.value_max * self.dist.need_max),
                self.visible()[..., None].float(),
            ],
            -1,
        )
        return torch.cat([uavs.flatten(1), targets.flatten(1), (self.t.float() / self.cfg.horizon)[:, None]], -1)

    # -- dynamics ----------------------------------------------------------------------------------------------

    def velocity_command(self, action: torch.Tensor) -> torch.Tensor:
        """(E, N, 2) desired velocity of an action (``uavgnn.envs.actions.velocity_command``)."""
        return actions.velocity_command(self, action)

    def available_actions(self) -> torch.Tensor:
        """(E, N, A) bool: the discrete actions that make sense now (``uavgnn.envs.actions.available_actions``)."""
        return actions.available_actions(self)

    def target_distance(self) -> torch.Tensor:
        """(E, N, M) distance of every UAV to every target."""
        return (self.target_pos[:, None] - self.pos[:, :, None]).norm(dim=-1)

    def nearest_open_distance(self, distance: torch.Tensor | None = None) -> torch.Tensor:
        """(E, N) distance of each UAV to its nearest visible open target (0 when none is left);
        ``distance``: ``target_distance()`` when the caller has it already."""
        d = self.target_distance() if distance is None else distance
        return d.masked_fill(~self.visible()[:, None], float("inf")).amin(-1).nan_to_num(posinf=0.0)

    def step(self, action: torch.Tensor) -> Step:
        cfg = self.cfg
        before = self.nearest_open_distance()
        down = self.down()  # failed UAVs neither serve nor collide
        dv = clamp_norm(self.velocity_command(action) - self.vel, cfg.max_accel * cfg.dt)
        disturbance = self.wind[:, None] - self.drag[..., None] * self.vel
        vel = clamp_norm(self.vel + dv + disturbance * cfg.dt, cfg.max_speed)
        vel = vel * (self.energy > 0)[..., None]  # grounded UAVs stay put
        reach = (vel.norm(dim=-1) * cfg.dt).clamp(min=1e-12)
        vel = vel * (self.energy / reach).clamp(max=1.0)[..., None]  # no flying past the remaining energy
        new_pos = (self.pos + vel * cfg.dt).clamp(0.0, self.side)
        travel = (new_pos - self.pos).norm(dim=-1)
        self.pos, self.vel = new_pos, (new_pos - self.pos) / cfg.dt
        energy = self.energy - travel
        empty = energy < 1e-6  # float rounding must not leave a sliver of range
        exhausted = (self.energy > 0) & empty
        self.energy = energy.masked_fill(empty, 0.0)
        if cfg.target_speed > 0:
            self.target_pos, self.target_vel = disruptions.drift(self.target_pos, self.target_vel, self.side, cfg.dt)

        visible, distance = self.visible(), self.target_distance()
        within = (distance <= cfg.service_radius) & visible[:, None]  # (E, N, M)
        if down is not None:
            within = within & ~down[..., None]
        count = within.sum(1)
        completed = (count >= self.need) & visible
        share = torch.where(completed, self.value / count.clamp(min=1), torch.zeros_like(self.value))
        credit = (within.float() * share[:, None]).sum(-1)
        gap = (self.pos[:, None] - self.pos[:, :, None]).norm(dim=-1)
        gap = gap + torch.diag(torch.full((self.n_uav,), float("inf"), device=self.device))
        if down is not None:
            gap = gap.masked_fill(down[:, None] | down[..., None], float("inf"))
        collided = (gap < cfg.collision_radius).any(-1)
        task_reward = (
            credit
            - self.dist.lam * travel
            - cfg.collision_penalty * collided.float()
            - cfg.exhausted_penalty * exhausted.float()
        )
        self.open = self.open & ~completed
        self.t = self.t + 1
        if down is not None:  # the UAVs that fail now: grounded and silent from the next observation on
            fallen = self.down()
            self.energy, self.vel = self.energy.masked_fill(fallen, 0.0), self.vel.masked_fill(fallen[..., None], 0.0)
        self.ret = self.ret + task_reward
        self.n_completed = self.n_completed + completed.sum(1)
        done = (self.t >= cfg.horizon) | ~self.open.any(1)
        # potential-based hint, Phi = -approach_reward * distance to the nearest open target, Phi(end) = 0: over an
        # episode it sums to Phi's start value whatever the UAVs do, so it cannot change which policy is best
        after = torch.where(done[:, None], torch.zeros_like(before), self.nearest_open_distance(distance))
        shaped = task_reward + cfg.approach_reward * (before - after)
        mixed = (1 - cfg.team_weight) * shaped + cfg.team_weight * shaped.mean(1, keepdim=True)
        # a UAV's own collisions, not diluted by the team's mean (no ops when off)
        reward = (
            mixed
            - cfg.collision_hint
            * disruptions.hinted_collisions(cfg, collided, self.target_vel if cfg.target_speed > 0 else None)
            if cfg.collision_hint > 0
            else mixed
        )
        agent_return, episode_completion = self.ret.clone(), self.n_completed / self.n_target
        positions, target_positions = self.pos, self.target_pos  # an auto-reset makes new tensors: no copy
        if self.auto_reset:
            self._reset_where(done)
        if cfg.comm_drop > 0:  # this step's lost messages, for the observation that follows
            self.dropped = disruptions.message_drops(cfg, tuple(self.dropped.shape), self.generator)
        return Step(
            self.observe(),
            self.global_state(),
            reward,
            task_reward,
            done,
            completed.sum(1).float(),
            collided.sum(1).float(),
            agent_return.sum(1),
            agent_return,
            episode_completion,
            positions,
            target_positions,
            dv / cfg.dt,
            disturbance,
        )

    # -- resume ------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"tensors": {name: getattr(self, name) for name in self._names}, "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_tensors("environment state", state["tensors"], {name: getattr(self, name).shape for name in self._names})
        for name, value in state["tensors"].items():
            setattr(self, name, value.to(self.device))
        restore_stream(self.generator, state["generator"], "the environment")


def make_env(
    settings: EnvSettings, dist: SceneDistribution, n_envs: int, device: torch.device | str, seed: int, **kwargs: Any
) -> UAVEnv:
    """The environment of ``settings``: ``UAVEnv``, or your subclass of it that ``settings.target`` names
    (``env.target=mypkg.envs.MyEnv``: same constructor; override its reward, dynamics or scenes). What your
    class's ``__init__`` raises is one line naming ``env.target``."""
    found = env_class(settings.target)
    try:
        return found(settings, dist, n_envs, device, seed, **kwargs)
    except Exception as err:  # noqa: BLE001 - your class's: whatever it raises, one line naming it
        if found is UAVEnv or isinstance(err, (ConfigError, MemoryBudgetError)):
            raise
        lines = str(err).strip().splitlines()
        raise ConfigError(
            f"env.target={settings.target}: {found.__name__}(...) raised {type(err).__name__}: "
            f"{lines[0][:200] if lines else '(no message)'}"
        ) from None


def env_class(target: str | None) -> type[UAVEnv]:
    """``UAVEnv``, or the subclass of it ``target`` names; anything else is one line naming ``env.target``."""
    if target is None:
        return UAVEnv
    found = import_named(target, "env.target")
    if not (isinstance(found, type) and issubclass(found, UAVEnv)):
        raise ConfigError(
            f"env.target={target}: {found!r} is not a subclass of uavgnn.envs.uav_env.UAVEnv (the "
            "algorithms step it through that class's methods)"
        )
    return found
