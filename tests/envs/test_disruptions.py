"""Disruptions of the UAV environment worked by hand (failures, limited communication, moving targets), resumed
exactly, and the decentralised planner against the central one and against a brute force of what it observes."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
from test_uav_env import CPU, one_target_env, restored_env_repeats

from uavgnn.envs.actions import approach_velocity, intercept_point, motion_travel
from uavgnn.envs.disruptions import drift, heard_ahead
from uavgnn.envs.policies import (
    decentralised_planner,
    greedy_assignment,
    planner_going_home,
    random_policy,
    run_episodes,
    scripted_planner,
)
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.reporting.episodes import completed_targets, plot_episodes

NEIGHBOURS = 6 + 7 * 4  # own features, then 4 seen targets of 7: the first neighbour's offset comes next
SWARM = EnvSettings(n_uav=8, horizon=12, action="goto", obs_targets=4, obs_uavs=3)


def test_a_failed_uav_stops_serves_no_more_and_falls_silent() -> None:
    env = one_target_env(failures=1.0, obs_uavs=1)
    env.pos = torch.tensor([[[1.1, 0.5], [0.9, 0.5]]])  # both in the target's radius: need 2 met
    env.fail_at = torch.tensor([[1, 5]])  # UAV 0 fails after the first step
    env.target_pos = torch.tensor([[[1.0, 0.9]]])  # out of reach for now: the episode goes on
    assert env.observe()[0, 1, NEIGHBOURS + 4] == 1.0  # UAV 1 observes UAV 0 (present flag)
    env.step(torch.tensor([[[1.0, 0.0], [0.0, 0.0]]]))
    assert env.energy[0, 0] == 0 and env.vel[0, 0].abs().sum() == 0  # grounded now
    assert env.observe()[0, 1, NEIGHBOURS : NEIGHBOURS + 5].abs().sum() == 0  # silent: absent for UAV 1
    torch.testing.assert_close(env.pos[0], torch.tensor([[1.25, 0.5], [0.9, 0.5]]))
    env.target_pos = torch.tensor([[[1.075, 0.5]]])  # both 0.175 from it: in the radius again
    step = env.step(torch.zeros(1, 2, 2))
    assert step.completed.item() == 0  # UAV 0 no longer serves: the need of 2 is not met
    assert step.task_reward[0, 0] == 0  # no exhaustion penalty for a failure


def test_failures_happen_at_uniform_steps_with_the_chance_asked() -> None:
    env = UAVEnv(dataclasses.replace(SWARM, failures=0.3), SceneDistribution(), 2000, CPU, seed=0)
    fails = env.fail_at < SWARM.horizon
    assert fails.float().mean().item() == pytest.approx(0.3, abs=0.01)
    assert set(env.fail_at[fails].tolist()) == set(range(1, SWARM.horizon))


def test_a_uav_observes_only_the_uavs_in_its_comm_radius() -> None:
    settings = EnvSettings(n_uav=3, obs_uavs=2, comm_radius=0.5)
    env = UAVEnv(settings, SceneDistribution(), 1, CPU, seed=0)
    env.reset()
    env.pos = torch.tensor([[[0.5, 0.5], [0.9, 0.5], [1.5, 0.5]]])  # 0-1: 0.4, 1-2: 0.6, 0-2: 1.0
    obs = env.observe()[0]
    present = obs[:, NEIGHBOURS + 4 :: 5]  # each seen neighbour's present flag
    torch.testing.assert_close(present, torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0]]))
    torch.testing.assert_close(obs[0, NEIGHBOURS : NEIGHBOURS + 2], torch.tensor([0.4, 0.0]) / env.side)


def test_the_count_of_nearer_uavs_counts_only_the_ones_heard_by_brute_force() -> None:
    g = torch.Generator().manual_seed(0)
    e, n, m, kt = 3, 6, 5, 3
    distance = torch.rand(e, n, m, generator=g).round(decimals=1)  # ties on purpose
    live = torch.rand(e, n, generator=g) > 0.2
    targets = torch.randint(0, m, (e, n, kt), generator=g)
    heard = torch.rand(e, n, n, generator=g) > 0.4
    got = heard_ahead(distance, live, targets, heard)
    inf = float("inf")
    for b, i, k in itertools.product(range(e), range(n), range(kt)):
        t = int(targets[b, i, k])
        mine = float(distance[b, i, t]) if live[b, i] else inf
        expect = 0
        for j in range(n):
            theirs = float(distance[b, j, t]) if live[b, j] else inf
            if j != i and heard[b, i, j] and (theirs < mine or (theirs == mine and j < i)):
                expect += 1
        assert int(got[b, i, k]) == expect


def test_lost_messages_are_drawn_each_step_with_the_chance_asked_and_resume_exactly() -> None:
    settings = dataclasses.replace(SWARM, comm_drop=0.4, failures=0.5, target_speed=0.1)
    env = UAVEnv(settings, SceneDistribution(), 64, CPU, seed=1)
    env.reset()
    first = env.dropped.clone()
    env.step(random_policy(env))
    off_diagonal = ~torch.eye(8, dtype=torch.bool)
    assert env.dropped[:, off_diagonal].float().mean().item() == pytest.approx(0.4, abs=0.02)
    assert not torch.equal(env.dropped, first)  # a new draw every step
    restored_env_repeats(env, 15)  # past an auto-reset


def test_a_share_of_the_episodes_is_disrupted_and_the_rest_are_nominal() -> None:
    """``disrupted_share``: each episode has every disruption on or none (no failure, targets at rest, every UAV
    heard), drawn again at each reset and resumed exactly."""
    settings = dataclasses.replace(SWARM, failures=1.0, comm_radius=0.3, target_speed=0.2, disrupted_share=0.3)
    env = UAVEnv(settings, SceneDistribution(), 500, CPU, seed=0)
    calm = env.calm.clone()
    assert calm.float().mean().item() == pytest.approx(0.7, abs=0.05)
    assert (env.target_vel[calm] == 0).all() and (env.fail_at[calm] == SWARM.horizon).all()
    speed = env.target_vel[~calm].norm(dim=-1)
    torch.testing.assert_close(speed, torch.full_like(speed, 0.2))
    assert (env.fail_at[~calm] < SWARM.horizon).all()  # failures=1.0: every UAV of a disrupted episode fails
    _, _, heard = env.neighbours()
    assert heard[calm].all() and not heard[~calm].all()  # the radius cuts only the disrupted episodes
    restored = restored_env_repeats(env, SWARM.horizon + 1)  # past the auto-reset: drawn again
    assert restored[-1].obs.shape[0] == 500 and not torch.equal(env.calm, calm)


def test_one_disruption_a_disrupted_episode_and_late_targets_only_there() -> None:
    """``one_disruption``: a disrupted episode has exactly one kind on (failures, hearing, moving or late targets),
    each about as often; late targets appear over ``late_appear_steps``, the others' over ``appear_steps``."""
    settings = dataclasses.replace(
        SWARM, failures=1.0, comm_radius=0.3, target_speed=0.2, appear_steps=3, late_appear_steps=12
    )
    settings = dataclasses.replace(settings, disrupted_share=0.8, one_disruption=True)
    env = UAVEnv(settings, SceneDistribution(), 2000, CPU, seed=0)
    _, _, heard = env.neighbours()
    on = torch.stack(
        [
            (env.fail_at < settings.horizon).any(1),
            ~heard.flatten(1).all(1),  # a radius of 0.3 cuts some pair in every scene
            env.target_vel.norm(dim=-1).gt(0).all(1),
            env.appear_at.ge(settings.appear_steps).any(1),  # some targets later than appear_steps
        ],
        1,
    )
    assert on.sum(1).le(1).all()
    assert env.appear_at[~on[:, 3]].lt(settings.appear_steps).all() and env.appear_at.lt(12).all()
    share = on.float().mean(0)
    torch.testing.assert_close(share, torch.full((4,), 0.2), atol=0.03, rtol=0)
    assert on.any(1).float().mean().item() == pytest.approx(0.8, abs=0.03)
    restored_env_repeats(env, SWARM.horizon + 1)  # past the auto-reset: drawn again, resumed exactly


def test_each_seen_targets_velocity_is_observed_and_idle_uavs_go_home_only_where_targets_rest() -> None:
    """``obs_target_velocity``: a seen target's features end with its velocity (in UAV top speeds) before the
    present flag, zero where targets rest, and nothing else moves; ``planner_going_home(at_rest=True)`` is the
    planner sending idle UAVs home in the episodes at rest and the plain planner among moving targets."""
    mixed = dataclasses.replace(SWARM, goto_home=True, target_speed=0.2, disrupted_share=0.5)
    seeing = dataclasses.replace(mixed, obs_target_velocity=True)
    env, plain = (UAVEnv(s, SceneDistribution(), 64, CPU, seed=3) for s in (seeing, mixed))
    obs, without = env.observe(), plain.observe()
    assert obs.shape[-1] == seeing.obs_dim() == without.shape[-1] + 2 * SWARM.obs_targets
    own, width = 6 + 2, 7 + 2  # the way home; a seen target's 7 features and its velocity
    _, j, present = env.candidates()
    for e, n, k in itertools.product(range(64), range(8), range(SWARM.obs_targets)):
        seen = obs[e, n, own + k * width : own + (k + 1) * width]
        velocity = env.target_vel[e, j[e, n, k]] / SWARM.max_speed if present[e, n, k] else torch.zeros(2)
        torch.testing.assert_close(seen[6:8], velocity)
        torch.testing.assert_close(torch.cat([seen[:6], seen[8:]]), without[e, n, own + k * 7 : own + (k + 1) * 7])
    resting = UAVEnv(dataclasses.replace(seeing, target_speed=0.0), SceneDistribution(), 8, CPU, seed=3).observe()
    assert (resting[..., own : own + width * SWARM.obs_targets].view(8, 8, -1, width)[..., 6:8] == 0).all()
    moving = env.target_vel.flatten(1).ne(0).any(1)
    assert moving.any() and (~moving).any()
    going, home = planner_going_home(env, at_rest=True), planner_going_home(env)
    assert torch.equal(going[moving], scripted_planner(env)[moving]) and torch.equal(going[~moving], home[~moving])
    assert (home[moving] == seeing.home_action()).any()  # the rule without at_rest sends some home there


def test_a_uav_observes_its_targets_as_the_planner_told_their_motion_costs_them_by_brute_force() -> None:
    """``obs_motion_weight``: a seen target's distance is the pair's ``motion_travel`` (in the observation's unit)
    and its count of nearer UAVs counts the UAVs with range whose pair costs less (ties: lower index first, at most
    the largest need); the rest of the observation, and everything where targets rest, is as without it."""
    mixed = dataclasses.replace(SWARM, target_speed=0.2, disrupted_share=0.5)
    told = dataclasses.replace(mixed, obs_motion_weight=0.25)
    env, plain = (UAVEnv(s, SceneDistribution(), 16, CPU, seed=4) for s in (told, mixed))
    for _ in range(2):
        action = random_policy(plain)
        env.step(action), plain.step(action)
    env.energy[0, 0] = 0.0  # grounded: behind every UAV with range
    plain.energy[0, 0] = 0.0
    obs, without = env.observe(), plain.observe()
    cost = motion_travel(env.pos, env.target_pos, env.target_vel, SWARM.max_speed, 0.25)
    _, j, present = env.candidates()
    own = 6
    for e, n, k in itertools.product(range(16), range(8), range(SWARM.obs_targets)):
        seen, base = (o[e, n, own + k * 7 : own + (k + 1) * 7] for o in (obs, without))
        if not present[e, n, k]:
            assert (seen == 0).all()
            continue
        t = int(j[e, n, k])
        live = env.energy[e] > 0
        mine = cost[e, n, t] if live[n] else float("inf")
        ahead = sum(
            1 for u in range(8) if u != n and live[u] and (cost[e, u, t] < mine or (cost[e, u, t] == mine and u < n))
        )
        torch.testing.assert_close(seen[2], cost[e, n, t] / env.side)
        assert seen[5] * env.dist.need_max == pytest.approx(min(ahead, env.dist.need_max))
        torch.testing.assert_close(seen[[0, 1, 3, 4, 6]], base[[0, 1, 3, 4, 6]])
    resting = env.target_vel.flatten(1).eq(0).all(1)
    assert resting.any()
    torch.testing.assert_close(obs[resting], without[resting])
    assert told.observation() != mixed.observation()  # a policy trained on one is refused the other


def test_moving_targets_drift_and_bounce_off_the_walls_by_hand() -> None:
    pos = torch.tensor([[[0.95, 0.5], [0.5, 0.05]]])
    vel = torch.tensor([[[0.1, 0.0], [0.0, -0.1]]])
    moved, turned = drift(pos, vel, side=1.0, dt=1.0)
    torch.testing.assert_close(moved, torch.tensor([[[0.95, 0.5], [0.5, 0.05]]]))  # 1.05 -> 0.95, -0.05 -> 0.05
    torch.testing.assert_close(turned, torch.tensor([[[-0.1, 0.0], [0.0, 0.1]]]))
    env = UAVEnv(dataclasses.replace(SWARM, target_speed=0.2), SceneDistribution(), 256, CPU, seed=0)
    before = env.target_pos.clone()
    env.step(torch.zeros(256, 8, dtype=torch.long))
    moved = (env.target_pos - before).norm(dim=-1)
    inside = ((before > 0.2) & (before < env.side - 0.2)).all(-1)  # away from the walls: a straight 0.2
    torch.testing.assert_close(moved[inside], torch.full_like(moved[inside], 0.2))


def test_the_meeting_point_with_a_moving_target_by_hand() -> None:
    """Head-on: 1 away closing at 0.1 + 0.3 meets at t = 2.5; across: |(0.3, 0.15 t)| = 0.3 t at t = 2 / sqrt(3);
    towards a wall: 0.8 + 0.2 t = 0.3 t at t = 8, 2.5 along the straight track, which the walls of the unit arena
    fold back to 0.5 (off the east wall at t = 0.5, the west one at 5.5); a target at rest, or as fast as the UAV
    (exactly, or within the rounding of a cosine), is flown at where it is."""
    pos = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.1, 0.5], [0.0, 0.0]])
    goal = torch.tensor([[1.0, 0.0], [0.3, 0.0], [0.5, 0.5], [1.0, 0.0], [0.9, 0.5], [0.5, 0.5]])
    angle = torch.tensor(1.0)
    vel = torch.tensor([[-0.1, 0.0], [0.0, 0.15], [0.0, 0.0], [0.0, 0.3], [0.2, 0.0], [0.0, 0.0]])
    vel[5] = 0.3 * torch.stack([angle.cos(), angle.sin()])
    t = 2 / 3**0.5
    expected = torch.tensor([[0.75, 0.0], [0.3, 0.15 * t], [0.5, 0.5], [1.0, 0.0], [0.5, 0.5], [0.5, 0.5]])
    torch.testing.assert_close(intercept_point(pos, goal, vel, max_speed=0.3, side=1.0), expected)


def chase(action: str) -> UAVEnv:
    """A UAV 1 behind a target's track (need 1), the target moving away across it at 0.25 (the UAV's top speed
    0.3); the other UAV far off. Side 5.48: the target meets no wall for 17 steps."""
    settings = EnvSettings(n_uav=2, horizon=20, action=action, approach_reward=0.0, team_weight=0.0, target_speed=0.25)
    env = UAVEnv(settings, SceneDistribution(density=0.1), 1, CPU, seed=0, auto_reset=False)
    env.reset()
    env.pos, env.energy = torch.tensor([[[1.0, 1.0], [5.0, 5.0]]]), torch.tensor([[5.0, 5.0]])
    env.target_pos, env.target_vel = torch.tensor([[[2.0, 1.0]]]), torch.tensor([[[0.0, 0.25]]])
    env.need, env.value = torch.tensor([[1]]), torch.tensor([[2.0]])
    return env


def test_goto_catches_a_target_moving_at_five_sixths_of_its_speed() -> None:
    """The goto action heads for the meeting point: |(1, 0.25 t)| = 0.3 t at t = 6.03, (2, 2.508), so its first
    step (0.15 from rest, the acceleration limit) is along (1, 1.508); it serves the target at step 7. Flown at
    where the target is (the approach the goto actions had before), the UAV trails it out of the radius."""
    env = chase("goto")
    t = (1 / (0.3**2 - 0.25**2)) ** 0.5
    heading = torch.tensor([1.0, 0.25 * t])
    first = env.step(torch.tensor([[1, 0]]))
    torch.testing.assert_close(first.positions[0, 0], torch.tensor([1.0, 1.0]) + 0.15 * heading / heading.norm())
    completed = [env.step(torch.tensor([[1, 0]])).completed.item() for _ in range(6)]
    assert completed == [0.0] * 5 + [1.0]
    pursuit = chase("continuous")
    for _ in range(16):
        command = approach_velocity(pursuit.pos, pursuit.target_pos.expand(-1, 2, -1), pursuit.cfg)
        command[0, 1] = 0.0
        assert pursuit.step(command / pursuit.cfg.max_speed).completed.item() == 0


def test_an_episodes_picture_has_the_targets_where_they_were_at_each_step(tmp_path) -> None:
    """Moving targets in the recorded episode: a track per target from its start, one drift step apart; the
    targets the picture calls completed are the ones the environment completed (each step against where the
    targets were then), and the picture draws the tracks."""
    env = UAVEnv(dataclasses.replace(SWARM, target_speed=0.1), SceneDistribution(), 64, CPU, seed=1, auto_reset=True)
    scores = run_episodes(env, scripted_planner)
    assert scores.targets.shape == (scores.trajectory.shape[0], env.n_target, 2)
    hops = (scores.targets[1:] - scores.targets[:-1]).norm(dim=-1)
    inside = ((scores.targets[:-1] > 0.1) & (scores.targets[:-1] < env.side - 0.1)).all(-1)
    torch.testing.assert_close(hops[inside], torch.full_like(hops[inside], 0.1))
    done = completed_targets(scores, SWARM.service_radius)
    assert int(done.sum()) == round(float(scores.completion[0]) * env.n_target) > 0
    png = plot_episodes({"scripted planner": scores}, SWARM.service_radius, tmp_path / "moving.png")
    assert png.stat().st_size > 0


def test_what_a_pair_costs_a_planner_told_the_targets_motion_by_hand() -> None:
    """A UAV at the origin (top speed 0.3), a target 1 away: flying at it at 0.2 they meet at t = 2 (a flight of
    0.6), fleeing at 0.2 at t = 10 (3.0), at rest after 1.0; one faster than the UAV is costed by the distance now.
    A quarter of the meeting flight: 0.9, 1.5, 1.0, 1.0. So the planner told the motion sends the UAV at the target
    coming to it, 1.1 away (0.825 + 0.25 x 0.66 = 0.99), not at the fleeing one 1.0 away (1.5), as the planner
    that assumes targets at rest does."""
    pos = torch.zeros(1, 1, 2)
    goal = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]])
    vel = torch.tensor([[[-0.2, 0.0], [0.2, 0.0], [0.0, 0.0], [0.4, 0.0]]])
    torch.testing.assert_close(motion_travel(pos, goal, vel, 0.3, 0.25), torch.tensor([[[0.9, 1.5, 1.0, 1.0]]]))
    torch.testing.assert_close(motion_travel(pos, goal, vel, 0.3, 1.0), torch.tensor([[[0.6, 3.0, 1.0, 1.0]]]))
    settings = EnvSettings(n_uav=1, horizon=10, action="goto", obs_targets=2, target_speed=0.2)
    env = UAVEnv(settings, SceneDistribution(density=0.1), 1, CPU, seed=0)
    env.n_target, env.pos, env.energy = 2, torch.tensor([[[2.0, 2.0]]]), torch.tensor([[5.0]])
    env.target_pos = torch.tensor([[[3.0, 2.0], [2.0, 0.9]]])  # fleeing east, 1.0 away; coming north, 1.1 away
    env.target_vel = torch.tensor([[[0.2, 0.0], [0.0, 0.2]]])
    env.need, env.value, env.appear_at = torch.tensor([[1, 1]]), torch.tensor([[2.0, 2.0]]), torch.zeros(1, 2).long()
    env.open = torch.ones(1, 2, dtype=torch.bool)
    assert greedy_assignment(env).tolist() == [[0]] and greedy_assignment(env, 0.25).tolist() == [[1]]
    # goto actions: the nearest candidate is 1
    assert scripted_planner(env).tolist() == [[1]] and scripted_planner(env, 0.25).tolist() == [[2]]
    assert decentralised_planner(env, 0.25).tolist() == [[2]]


@pytest.mark.parametrize("motion_weight", [0.0, 0.25])
def test_with_everything_observed_the_decentralised_planner_is_the_central_one(motion_weight: float) -> None:
    """Each UAV seeing every UAV and target solves the central problem (in its own order): the same actions (told
    the targets' motion as well)."""
    settings = EnvSettings(n_uav=6, horizon=10, action="goto", obs_targets=3, obs_uavs=5, target_speed=0.2)
    env = UAVEnv(settings, SceneDistribution(target_ratio=0.5), 128, CPU, seed=0)
    env.reset()
    for _ in range(8):
        central = scripted_planner(env, motion_weight)
        torch.testing.assert_close(decentralised_planner(env, motion_weight), central)
        env.step(central)


@pytest.mark.parametrize("motion_weight", [0.0, 0.25])
def test_the_decentralised_planner_plans_on_what_each_uav_observes_by_brute_force(motion_weight: float) -> None:
    """Every UAV's action equals the central planner run on a copy of its environment holding only the UAVs it
    observes (itself first, its heard neighbours) and its candidate targets (told their motion as well)."""
    settings = dataclasses.replace(SWARM, comm_radius=1.5, appear_steps=4, target_speed=0.2 * (motion_weight > 0))
    env = UAVEnv(settings, SceneDistribution(), 6, CPU, seed=2)
    env.reset()
    for _ in range(3):
        env.step(random_policy(env))
    actions = decentralised_planner(env, motion_weight)
    _, j, present = env.candidates()
    i, heard, _ = env.neighbours()
    for b, u in itertools.product(range(env.n_envs), range(env.n_uav)):
        team = [u] + [int(x) for x, h in zip(i[b, u], heard[b, u]) if h]
        seen = [int(t) for t, p in zip(j[b, u], present[b, u]) if p]
        if not seen:
            assert actions[b, u] == 0
            continue
        local = UAVEnv(dataclasses.replace(settings, n_uav=len(team)), SceneDistribution(), 1, CPU, seed=0)
        local.n_target = len(seen)
        local.pos, local.energy = env.pos[b : b + 1, team], env.energy[b : b + 1, team]
        local.target_pos, local.need = env.target_pos[b : b + 1, seen], env.need[b : b + 1, seen]
        local.value = env.value[b : b + 1, seen]
        if settings.target_speed > 0:
            local.target_vel = env.target_vel[b : b + 1, seen]
        local.open = torch.ones(1, len(seen), dtype=torch.bool)
        local.appear_at, local.t = torch.zeros(1, len(seen), dtype=torch.long), torch.zeros(1, dtype=torch.long)
        target = int(greedy_assignment(local, motion_weight)[0, 0])
        assert int(actions[b, u]) == (0 if target < 0 else target + 1)
