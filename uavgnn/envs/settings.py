"""The settings of the multi-step UAV environment (the ``env`` config group) and the layouts they size: actions,
the global state, the observations (``uavgnn.problem.observation``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from uavgnn.problem.observation import (
    HOME_FEATURES,
    SEEN_TARGET_FEATURES,
    SELF_FEATURES,
    TARGET_VELOCITY_FEATURES,
    ObservationLayout,
)
from uavgnn.problem.scenes import SceneDistribution

# Discrete actions: stay, then 8 headings counter-clockwise from east.
_ANGLES = torch.arange(8) * (torch.pi / 4)
HEADINGS = torch.cat([torch.zeros(1, 2), torch.stack([_ANGLES.cos(), _ANGLES.sin()], 1)])
N_DISCRETE = HEADINGS.shape[0]
UAV_FEATURES, TARGET_FEATURES = 5, 5  # per UAV and per target in the global state


@dataclass
class EnvSettings:
    """The ``env`` config group: sizes, dynamics, reward and observation settings."""

    name: str = "default"
    n_uav: int = 4  # UAVs per environment (targets: task.target_ratio of it)
    n_envs: int = 64  # environments stepped together
    horizon: int = 25  # steps per episode
    action: str = "continuous"  # continuous: velocity in [-1, 1]^2 | discrete: stay, 8 headings | goto: stay, a target
    # goto actions end with one more: fly back to where the UAV started (spread out again, for targets still to
    # appear); the UAV then observes the way there too
    goto_home: bool = False
    dt: float = 1.0  # seconds per step
    max_speed: float = 0.3  # distance per second
    max_accel: float = 0.15  # change of velocity per second
    service_radius: float = 0.25  # a UAV this close to a target serves it
    collision_radius: float = 0.05  # UAVs closer than this collide
    appear_steps: int = 0  # targets appear at a uniform step in [0, appear_steps) (0: all at the start)
    collision_penalty: float = 0.1
    exhausted_penalty: float = 0.5
    approach_reward: float = 0.5  # weight of the progress-to-nearest-target hint (training reward only)
    team_weight: float = 0.5  # share of the team's mean reward in each UAV's training reward
    # training reward only: a UAV in a collision loses this much more, its own after the team's mix (the team's
    # collision penalty reaches each UAV divided by the swarm size)
    collision_hint: float = 0.0
    # the hint only in the episodes whose targets rest: among moving targets a UAV taught to avoid the others goes
    # home, where it costs (a policy tells the worlds apart with obs_target_velocity)
    collision_hint_at_rest: bool = False
    obs_targets: int = 4  # nearest open targets in a UAV's observation
    obs_uavs: int = 3  # nearest other UAVs in a UAV's observation
    # each seen target's velocity in the observation too (in UAV top speeds; zero where targets rest), so that a
    # policy trained among resting and moving targets can tell the two worlds apart wherever it sees a target
    obs_target_velocity: bool = False
    # a seen target's distance and the count of UAVs nearer to it, as the planner told the targets' motion reckons
    # them: this share of the flight to where the UAV meets it, the rest the distance now (motion_travel; 0: the
    # distance now), so that a policy taught by that planner observes what it plans on (needs env.target_speed > 0)
    obs_motion_weight: float = 0.0
    # the graph actor's observation graph links each seen UAV to each seen target too (the target's offset from it),
    # so that with model.layers >= 2 a UAV can read which neighbour is nearer to which target (off: a star)
    obs_links: bool = False
    # a UAV's candidate targets (observed, and what its goto actions name) only those within its range left: in a
    # large swarm the nearest open targets are mostly ones it cannot reach or others serve, unlike in a small one
    reachable_targets: bool = False
    # the length an observation's offsets and distances are measured in: side, the arena's (it grows with the
    # swarm: a policy trained small misjudges every distance at scale) | range, the UAVs' largest range (task's
    # range_max: the same at any swarm size)
    obs_scale: str = "side"
    wind: float = 0.0  # largest hidden wind acceleration of an episode (0: none)
    drag: float = 0.0  # largest hidden per-UAV linear drag coefficient (0: none)
    # disruptions (uavgnn.envs.disruptions), each off by default: the world the scripted planner does not assume
    failures: float = 0.0  # chance that a UAV fails during an episode (at a uniform step): it drops out, silent
    comm_radius: float = 0.0  # a UAV hears (observes) only the UAVs this close (0: every UAV)
    comm_drop: float = 0.0  # chance that a UAV misses another's message at a step (it is not observed then)
    target_speed: float = 0.0  # targets drift at this speed (uniform direction, reflected by the arena's walls)
    late_appear_steps: int = 0  # late targets: they appear over this many steps (the episode at most), not appear_steps
    disrupted_share: float = 1.0  # share of the episodes with the disruptions on (the rest nominal)
    one_disruption: bool = False  # each disrupted episode has one of the disruptions on, drawn uniformly
    target: Optional[str] = None  # your own environment: a UAVEnv subclass, module.Class (uavgnn.envs.uav_env.make_env)

    def n_targets(self, dist: SceneDistribution) -> int:
        return dist.n_targets(self.n_uav)

    def layout(self) -> ObservationLayout:
        """What a UAV's observation holds (``uavgnn.problem.observation``): the graph actor and critic are sized
        by it (a UAV with a home action observes the way home too)."""
        return ObservationLayout(
            self.obs_targets,
            self.obs_uavs,
            SELF_FEATURES + HOME_FEATURES * self.goto_home,
            SEEN_TARGET_FEATURES + TARGET_VELOCITY_FEATURES * self.obs_target_velocity,
            self.obs_links,
        )

    def obs_dim(self) -> int:
        return self.layout().obs_dim

    def observation(self) -> tuple[ObservationLayout, str, bool, float]:
        """What a policy's networks read: the layout, the unit of distances (``obs_scale``), whether its targets
        are only those in range (``reachable_targets``) and what their distances are (``obs_motion_weight``). A
        policy flies only an environment that gives the same."""
        return self.layout(), self.obs_scale, self.reachable_targets, self.obs_motion_weight

    def state_dim(self, dist: SceneDistribution) -> int:
        return UAV_FEATURES * self.n_uav + TARGET_FEATURES * self.n_targets(dist) + 1

    def home_action(self) -> int:
        """The index of the goto home action (``goto_home``): after stay and the ``obs_targets`` targets."""
        return 1 + self.obs_targets

    def action_dim(self) -> int:
        """Continuous: 2 velocity components; discrete, goto: the number of actions."""
        return {"continuous": 2, "discrete": N_DISCRETE}.get(self.action, 1 + self.obs_targets + self.goto_home)

    def bytes_per_env(self, dist: SceneDistribution) -> int:
        """Peak memory of one environment while it is stepped: UAV-target distances and the observations
        dominate (measured: 8.5 KB at 4 UAVs, 41 KB at 16, 274 KB at 64; this formula is 10-20% above)."""
        n, m = self.n_uav, self.n_targets(dist)
        return 4 * (20 * n * m + 12 * n * self.obs_dim() + self.state_dim(dist))
