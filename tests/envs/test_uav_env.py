"""The multi-step UAV environment: generator, dynamics and rewards worked by hand, batching, resume, baselines."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch

from uavgnn.envs.policies import decentralised_planner, random_policy, run_episodes, scripted_planner
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.evaluation.episodes import compare_policies
from uavgnn.infrastructure.errors import CheckpointError
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.scene_batch import generate_scene_batch
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.reporting.episodes import episode_gif, plot_episodes
from uavgnn.runs.checkpoints import load_weights

CPU = torch.device("cpu")


@pytest.mark.parametrize("positions", ["uniform", "clustered"])
def test_torch_generator_follows_the_numpy_generators_distribution(positions) -> None:
    dist = SceneDistribution(positions=positions)
    scenes = generate_scenes(dist, 16, 1500, seed=0)
    batch = generate_scene_batch(dist, 16, 1500, torch.Generator().manual_seed(0), CPU)
    reference = {
        "uav_pos": np.stack([s.uav_pos for s in scenes]),
        "target_pos": np.stack([s.target_pos for s in scenes]),
        "uav_range": np.stack([s.uav_range for s in scenes]),
        "need": np.stack([s.need for s in scenes]),
        "value": np.stack([s.value for s in scenes]),
    }
    for name, ref in reference.items():
        ours = getattr(batch, name).double().numpy()
        assert ours.shape == ref.shape, name
        # five standard errors of a difference of two samples; clustered positions are independent per scene only
        n = len(scenes) if positions == "clustered" and name.endswith("pos") else ref.size
        assert abs(ours.mean() - ref.mean()) < 5 * ref.std() * math.sqrt(2 / n), name
        assert abs(ours.std() - ref.std()) < 5 * ref.std() * math.sqrt(1 / n), name
        span = (min(ref.min(), ours.min()), max(ref.max(), ours.max()))  # float32 vs float64 square sides
        hist_ours, edges = np.histogram(ours, bins=10, range=span)
        hist_ref, _ = np.histogram(ref, bins=edges)
        assert np.abs(hist_ours / ours.size - hist_ref / ref.size).max() < 5 * math.sqrt(0.5 / n), name


def one_target_env(**overrides) -> UAVEnv:
    """Two UAVs, one target (need 2, value 3) placed by hand; lam 0.1, no hint, no team mixing."""
    settings = EnvSettings(n_uav=2, n_envs=1, approach_reward=0.0, team_weight=0.0, **overrides)
    env = UAVEnv(settings, SceneDistribution(target_ratio=0.5, lam=0.1), 1, CPU, seed=0)
    env.reset()
    env.pos = torch.tensor([[[0.5, 0.5], [1.5, 1.5]]])  # the square side is sqrt(3) = 1.73
    env.energy = torch.tensor([[3.0, 3.0]])
    env.target_pos = torch.tensor([[[1.0, 0.5]]])
    env.need, env.value = torch.tensor([[2]]), torch.tensor([[3.0]])
    return env


def test_acceleration_and_speed_limits_and_travel_cost_by_hand() -> None:
    env = one_target_env()
    step = env.step(torch.tensor([[[1.0, 0.0], [0.0, 0.0]]]))  # UAV 0 full speed east, UAV 1 stays
    # From rest the velocity can change by max_accel * dt = 0.15: UAV 0 moves 0.15 east.
    torch.testing.assert_close(step.positions, torch.tensor([[[0.65, 0.5], [1.5, 1.5]]]))
    torch.testing.assert_close(env.energy, torch.tensor([[2.85, 3.0]]))
    torch.testing.assert_close(step.task_reward, torch.tensor([[-0.1 * 0.15, 0.0]]))
    for _ in range(3):  # 0.30, then capped at max_speed 0.3 per step
        step = env.step(torch.tensor([[[1.0, 0.0], [0.0, 0.0]]]))
    torch.testing.assert_close(step.positions[0, 0], torch.tensor([0.65 + 0.3 + 0.3 + 0.3, 0.5]))


def test_goto_actions_fly_at_the_named_candidate_target_and_brake_by_hand() -> None:
    env = one_target_env(action="goto")  # obs_targets 4, one target: actions 0 (hover), 1 (the target), 2-4 absent
    assert env.available_actions().tolist() == [[[True, True, False, False, False]] * 2]
    step = env.step(torch.tensor([[1, 0]]))  # UAV 0 heads for the target 0.5 east; UAV 1 hovers
    torch.testing.assert_close(step.positions, torch.tensor([[[0.65, 0.5], [1.5, 1.5]]]))  # accel 0.15 from rest
    # 0.35 to go: command speed 0.35 - 0.6 * 0.25 = 0.2 (stop 0.15 short); an absent candidate (3) hovers
    step = env.step(torch.tensor([[1, 3]]))
    torch.testing.assert_close(step.positions, torch.tensor([[[0.85, 0.5], [1.5, 1.5]]]))
    step = env.step(torch.tensor([[1, 0]]))  # 0.15 to go: command 0; braking from 0.2 is limited to 0.15
    torch.testing.assert_close(step.positions, torch.tensor([[[0.9, 0.5], [1.5, 1.5]]]))
    env.energy[0, 0] = 0.0
    assert env.available_actions()[0, 0].tolist() == [True, False, False, False, False]  # grounded: hover only


def test_the_home_action_flies_a_uav_back_to_where_it_started_by_hand() -> None:
    """``goto_home``: the last goto action flies back to the start (accelerating from rest like any command),
    which the UAV observes as an offset after its position (its graph node too); a grounded UAV cannot take it;
    resumed exactly."""
    from uavgnn.problem.observation import SELF_FEATURES, observation_graph

    env = one_target_env(action="goto", goto_home=True)  # actions: hover, 4 candidates, home
    env.home = torch.tensor([[[0.5, 0.5], [1.5, 0.5]]])  # UAV 0 is home; UAV 1 1.0 north of it
    assert env.available_actions().tolist() == [[[True, True, False, False, False, True]] * 2]
    step = env.step(torch.tensor([[0, 5]]))
    torch.testing.assert_close(step.positions, torch.tensor([[[0.5, 0.5], [1.5, 1.35]]]))  # accel 0.15 from rest
    step = env.step(torch.tensor([[0, 5]]))  # 0.85 to go: full speed 0.3
    torch.testing.assert_close(step.positions, torch.tensor([[[0.5, 0.5], [1.5, 1.05]]]))
    own = env.observe()[0, :, SELF_FEATURES : SELF_FEATURES + 2]
    torch.testing.assert_close(own, torch.tensor([[0.0, 0.0], [0.0, -0.55]]) / env.side)
    env.energy[0, 1] = 0.0
    assert env.available_actions()[0, 1].tolist() == [True, False, False, False, False, False]  # grounded
    settings = EnvSettings(n_uav=8, horizon=6, action="goto", goto_home=True)
    wider = UAVEnv(settings, SceneDistribution(), 4, CPU, seed=0)
    graph, obs = observation_graph(wider.observe(), settings.layout()), wider.observe()
    torch.testing.assert_close(graph.x[:, 0, : SELF_FEATURES + 2], obs[..., : SELF_FEATURES + 2].flatten(0, 1))
    restored_env_repeats(wider, 8)  # past an auto-reset


def test_with_the_home_action_the_tables_add_the_planner_sending_idle_uavs_home() -> None:
    """``planner_going_home``: the central planner's action, or home for a UAV with range it leaves hovering; its
    row joins every test table of an environment with the home action (and only there)."""
    from uavgnn.envs.policies import planner_going_home

    settings = EnvSettings(n_uav=8, horizon=10, action="goto", goto_home=True, appear_steps=8)
    env = UAVEnv(settings, SceneDistribution(), 32, CPU, seed=1)
    env.energy[0, :2] = 0.0  # grounded: they hover
    planner, going_home = scripted_planner(env), planner_going_home(env)
    for e, n in itertools.product(range(32), range(8)):
        idle = planner[e, n] == 0 and env.energy[e, n] > 0
        assert going_home[e, n] == (settings.obs_targets + 1 if idle else planner[e, n])
    assert (going_home == settings.obs_targets + 1).any() and (going_home[0, :2] == 0).all()
    local, local_home = decentralised_planner(env), planner_going_home(env, planner=decentralised_planner)
    for e, n in itertools.product(range(32), range(8)):  # the same rule on the decentralised planner
        idle = local[e, n] == 0 and env.energy[e, n] > 0
        assert local_home[e, n] == (settings.obs_targets + 1 if idle else local[e, n])
    assert (local_home == settings.obs_targets + 1).any()
    rows, _ = compare_policies({}, settings, SceneDistribution(), 16, CPU)
    assert [r["method"] for r in rows][:4] == [
        "scripted planner",
        "decentralised planner",
        "CBBA",
        "planner, idle home",
    ]
    rows, _ = compare_policies({}, dataclasses.replace(settings, goto_home=False), SceneDistribution(), 16, CPU)
    assert "planner, idle home" not in [r["method"] for r in rows]


def test_the_planner_flies_the_same_episodes_with_goto_actions_as_with_velocities() -> None:
    """With every target a candidate, goto actions name what the planner would steer at: identical returns."""
    returns = {}
    for action in ("continuous", "goto"):
        _, scores = compare_policies({}, EnvSettings(action=action, horizon=14), SceneDistribution(), 64, CPU)
        returns[action] = {name: s.episode_return for name, s in scores.items() if name != "random"}
    for name in ("scripted planner", "nearest target"):
        torch.testing.assert_close(returns["goto"][name], returns["continuous"][name])


def test_a_target_completes_when_need_uavs_are_in_the_radius_at_once() -> None:
    env = one_target_env()
    env.pos = torch.tensor([[[1.1, 0.5], [1.6, 0.5]]])  # UAV 0 inside the radius 0.25, UAV 1 outside
    step = env.step(torch.zeros(1, 2, 2))
    assert step.completed.item() == 0 and step.task_reward.abs().max() == 0
    env.pos = torch.tensor([[[1.1, 0.5], [0.9, 0.5]]])
    step = env.step(torch.zeros(1, 2, 2))
    assert step.completed.item() == 1
    torch.testing.assert_close(step.task_reward, torch.tensor([[1.5, 1.5]]))  # value 3 shared by the two
    assert bool(step.done[0])  # every target completed: the episode ends and the env resets
    assert env.t.item() == 0 and step.episode_return.item() == pytest.approx(3.0)


def test_each_uav_observes_how_many_uavs_with_range_are_nearer_to_each_target_by_hand() -> None:
    """The coordination feature: with the need, it says whether a UAV is among those that should serve."""
    settings = EnvSettings(n_uav=3, n_envs=1, obs_targets=1, obs_uavs=2)
    env = UAVEnv(settings, SceneDistribution(target_ratio=1 / 3, need_max=3), 1, CPU, seed=0)
    env.reset()
    env.pos = torch.tensor([[[0.4, 0.5], [0.2, 0.5], [0.9, 0.5]]])  # distances to the target 0.3, 0.1, 0.8
    env.target_pos = torch.tensor([[[0.1, 0.5]]])
    env.energy = torch.tensor([[1.0, 1.0, 1.0]])
    ahead = 6 + 5  # own features, then the target's dx, dy, distance, need, value: the count comes next
    torch.testing.assert_close(env.observe()[0, :, ahead], torch.tensor([1.0, 0.0, 2.0]) / 3)
    env.energy = torch.tensor([[1.0, 0.0, 1.0]])  # the nearest UAV is grounded: it no longer counts
    torch.testing.assert_close(env.observe()[0, :, ahead], torch.tensor([0.0, 2.0, 1.0]) / 3)


def test_collisions_and_running_out_of_range_are_penalised() -> None:
    env = one_target_env(collision_penalty=0.2, exhausted_penalty=0.5)
    env.pos = torch.tensor([[[0.5, 0.5], [0.52, 0.5]]])
    env.energy = torch.tensor([[0.1, 3.0]])
    step = env.step(torch.tensor([[[-1.0, 0.0], [0.0, 0.0]]]))  # UAV 0 flies 0.1 (its last energy) west
    torch.testing.assert_close(step.positions[0, 0], torch.tensor([0.4, 0.5]))
    assert env.energy[0, 0].item() == 0.0
    torch.testing.assert_close(step.task_reward, torch.tensor([[-0.1 * 0.1 - 0.5, 0.0]]))  # 0.12 apart: no collision
    env.pos = torch.tensor([[[0.5, 0.5], [0.52, 0.5]]])
    step = env.step(torch.tensor([[[1.0, 0.0], [0.0, 0.0]]]))  # grounded UAV 0 cannot move; 0.02 apart
    torch.testing.assert_close(step.positions[0, 0], torch.tensor([0.5, 0.5]))
    torch.testing.assert_close(step.task_reward, torch.tensor([[-0.2, -0.2]]))


def test_the_collision_hint_charges_a_uav_its_own_collisions_in_training_only_by_hand() -> None:
    """``collision_hint``: the team's mean spreads a collision over the swarm; the hint charges the colliding UAVs
    in full, in the training reward only (returns, in the task's reward, are unchanged)."""
    settings = EnvSettings(n_uav=3, n_envs=1, approach_reward=0.0, team_weight=1.0, collision_penalty=0.2)
    rewards = {}
    for hint in (0.0, 0.3):
        env = UAVEnv(
            dataclasses.replace(settings, collision_hint=hint), SceneDistribution(target_ratio=1 / 3), 1, CPU, seed=0
        )
        env.reset()
        env.pos = torch.tensor([[[0.5, 0.5], [0.52, 0.5], [1.5, 1.5]]])  # UAVs 0 and 1 0.02 apart: they collide
        env.vel, env.target_pos = torch.zeros(1, 3, 2), torch.tensor([[[1.0, 1.5]]])  # nobody serves the target
        step = env.step(torch.zeros(1, 3, 2))
        torch.testing.assert_close(step.task_reward, torch.tensor([[-0.2, -0.2, 0.0]]))
        rewards[hint] = step.reward
    team = -0.4 / 3  # the team's mean of the task reward, each UAV's training reward without the hint
    torch.testing.assert_close(rewards[0.0], torch.full((1, 3), team))
    torch.testing.assert_close(rewards[0.3], torch.tensor([[team - 0.3, team - 0.3, team]]))


def test_the_collision_hint_at_rest_charges_only_where_the_targets_rest_by_hand() -> None:
    """``collision_hint_at_rest``: two episodes with the same collision (UAVs 0 and 1 0.02 apart), the first's
    target at rest, the second's moving: the hint charges the colliding UAVs of the first only; without the
    setting, of both. The task's reward is the same in all four."""
    settings = EnvSettings(n_uav=3, n_envs=2, approach_reward=0.0, team_weight=1.0, collision_penalty=0.2)
    team, rewards = -0.4 / 3, {}
    for at_rest in (False, True):
        env = UAVEnv(
            dataclasses.replace(settings, collision_hint=0.3, target_speed=0.2, collision_hint_at_rest=at_rest),
            SceneDistribution(target_ratio=1 / 3),
            2,
            CPU,
            seed=0,
        )
        env.reset()
        env.pos = torch.tensor([[[0.5, 0.5], [0.52, 0.5], [1.5, 1.5]]]).repeat(2, 1, 1)
        env.vel, env.target_pos = torch.zeros(2, 3, 2), torch.tensor([[[1.0, 1.5]], [[1.0, 1.5]]])
        env.target_vel = torch.tensor([[[0.0, 0.0]], [[0.0, 0.2]]])  # nobody serves the target either way
        step = env.step(torch.zeros(2, 3, 2))
        torch.testing.assert_close(step.task_reward, torch.tensor([[-0.2, -0.2, 0.0]]).repeat(2, 1))
        rewards[at_rest] = step.reward
    charged = torch.tensor([[team - 0.3, team - 0.3, team]])
    torch.testing.assert_close(rewards[False], charged.repeat(2, 1))
    torch.testing.assert_close(rewards[True], torch.cat([charged, torch.full((1, 3), team)]))


def test_reachable_targets_leaves_out_the_targets_beyond_a_uavs_range_by_hand() -> None:
    """``reachable_targets``: a UAV with range 1.0 at (0, 0), targets at distances 0.5, 2.0 and 0.8 (all open):
    its candidates are the two within range, nearest first; the goto action of the third slot is unavailable and
    the slot is absent from its observation. Without the setting all three are candidates, nearest first."""
    settings = EnvSettings(n_uav=1, n_envs=1, action="goto", obs_targets=3)
    got = {}
    for reachable in (False, True):
        env = UAVEnv(
            dataclasses.replace(settings, reachable_targets=reachable),
            SceneDistribution(target_ratio=3.0),
            1,
            CPU,
            seed=0,
        )
        env.reset()
        env.pos, env.energy = torch.zeros(1, 1, 2), torch.ones(1, 1)
        env.target_pos = torch.tensor([[[0.5, 0.0], [0.0, 2.0], [0.0, 0.8]]])
        distance, index, present = env.candidates()
        got[reachable] = (index[0, 0].tolist(), present[0, 0].tolist(), env.available_actions()[0, 0].tolist())
        if reachable:
            layout = settings.layout()
            width = layout.target_features
            slots = env.observe()[0, 0, layout.self_features : layout.self_features + 3 * width].view(3, width)
            assert slots[:, -1].tolist() == [1.0, 1.0, 0.0] and slots[2].abs().sum() == 0  # the last: absent
            torch.testing.assert_close(distance[0, 0, :2], torch.tensor([0.5, 0.8]))
    assert got[False] == ([0, 2, 1], [True, True, True], [True, True, True, True])
    assert got[True][:2] == ([0, 2, 1], [True, True, False]) and got[True][2] == [True, True, True, False]


def test_a_batch_of_environments_steps_like_each_environment_alone() -> None:
    dist, settings = SceneDistribution(), EnvSettings(n_uav=5, n_envs=6, appear_steps=3)
    batch = UAVEnv(settings, dist, 6, CPU, seed=1)
    batch.reset()
    singles = []
    for e in range(6):
        single = UAVEnv(settings, dist, 1, CPU, seed=2)
        for name in batch._names:
            setattr(single, name, getattr(batch, name)[e : e + 1].clone())
        singles.append(single)
    for _ in range(4):
        action = torch.rand(6, 5, 2, generator=torch.Generator().manual_seed(7)) * 2 - 1
        step = batch.step(action)
        for e, single in enumerate(singles):
            alone = single.step(action[e : e + 1])
            for field in ("obs", "state", "reward", "task_reward", "done", "positions"):
                torch.testing.assert_close(getattr(step, field)[e : e + 1], getattr(alone, field))


def test_episodes_auto_reset_and_a_restored_environment_continues_identically() -> None:
    settings = EnvSettings(n_uav=4, n_envs=8, horizon=5)
    env = UAVEnv(settings, SceneDistribution(), 8, CPU, seed=3)
    env.reset()
    for _ in range(3):
        env.step(random_policy(env))
    first = restored_env_repeats(env, 4)
    assert bool(first[1].done.all()) and int(env.t.max()) == 2  # the horizon reset every env at step 5


def restored_env_repeats(env: UAVEnv, steps: int) -> list:
    """``steps`` random steps of ``env``, and the same steps of another env (another seed) restored from its
    ``state_dict`` first: checked equal (observations, rewards); the first env's steps."""
    saved = env.state_dict()
    first = [env.step(random_policy(env)) for _ in range(steps)]
    again = UAVEnv(env.cfg, env.dist, env.n_envs, CPU, seed=99)
    again.load_state_dict(saved)
    for step in first:
        repeat = again.step(random_policy(again))
        torch.testing.assert_close(repeat.obs, step.obs)
        torch.testing.assert_close(repeat.reward, step.reward)
        torch.testing.assert_close(repeat.task_reward, step.task_reward)
    return first


def test_an_environment_saved_on_another_kind_of_device_is_refused_in_one_line() -> None:
    """A CUDA generator's state is 16 bytes (Philox), a CPU's 5,056: a CPU run given a GPU run's environment
    names what does not fit instead of failing inside torch."""
    env = UAVEnv(EnvSettings(n_uav=4), SceneDistribution(), 2, CPU, seed=0)
    saved = env.state_dict()
    cuda_like = {**saved, "generator": torch.zeros(16, dtype=torch.uint8)}
    with pytest.raises(CheckpointError, match="^the environment's random stream was saved on another kind of device"):
        env.load_state_dict(cuda_like)
    with pytest.raises(CheckpointError, match=r"^checkpoint last.pt \(a MAPPO run\): the environment's random stream"):
        load_weights(env, cuda_like, "last.pt", "a MAPPO run")  # as a resume says it: the file, then the advice
    env.load_state_dict(saved)  # its own state still loads


def test_an_ended_episode_is_observed_afresh_or_finally_as_auto_reset_says() -> None:
    """At the horizon every episode ends. With auto-reset the step's observation is the next episode's first (time
    left 1, the fresh scene's targets; what the policy acts on next), without it the ended episode's last (time
    left 0), and the environment stays ended until ``reset``."""
    settings = EnvSettings(n_uav=4, horizon=3)
    envs = {auto: UAVEnv(settings, SceneDistribution(), 5, CPU, seed=8, auto_reset=auto) for auto in (True, False)}
    steps = {}
    for auto, env in envs.items():
        env.reset()
        for _ in range(settings.horizon):
            steps[auto] = env.step(torch.zeros(5, 4, 2))
    time_left = 3  # own features: velocity (2), range, time left, position (2)
    assert steps[True].done.all() and steps[False].done.all()
    assert (steps[True].obs[..., time_left] == 1).all() and (steps[False].obs[..., time_left] == 0).all()
    torch.testing.assert_close(steps[True].obs, envs[True].observe())
    torch.testing.assert_close(steps[False].obs, envs[False].observe())
    assert int(envs[False].t.min()) == settings.horizon and int(envs[True].t.max()) == 0
    assert not torch.equal(envs[True].target_pos, envs[False].target_pos)  # a fresh scene
    for name in ("reward", "task_reward", "episode_return", "positions"):  # the ended step itself is the same
        torch.testing.assert_close(getattr(steps[True], name), getattr(steps[False], name))


def test_observations_have_the_documented_sizes_and_stay_bounded() -> None:
    settings = EnvSettings(n_uav=6, obs_targets=4, obs_uavs=3)
    dist = SceneDistribution()
    env = UAVEnv(settings, dist, 16, CPU, seed=4)
    obs, state = env.reset()
    assert obs.shape == (16, 6, settings.obs_dim()) and state.shape == (16, settings.state_dim(dist))
    for _ in range(settings.horizon):
        step = env.step(random_policy(env))
        # relative velocities reach 2 max_speed; distances sqrt(2) sides; everything else is within [-1, 1]
        assert torch.isfinite(step.obs).all() and step.obs.abs().max() <= 2 + 1e-5


@pytest.mark.parametrize("action", ["continuous", "discrete", "goto"])
def test_the_scripted_planner_completes_most_targets_and_beats_the_uncoordinated_baselines(action, tmp_path) -> None:
    settings = EnvSettings(action=action)
    rows, scores = compare_policies({}, settings, SceneDistribution(), 128, CPU)
    by_name = {row["method"]: row for row in rows}
    assert by_name["scripted planner"]["completion_rate"] > 0.9
    # coordination pays: no UAV sent where it is not needed (travel), fewer UAVs crowding one target (collisions)
    assert by_name["scripted planner"]["return"] > by_name["nearest target"]["return"] + 0.2
    assert by_name["nearest target"]["return"] > by_name["random"]["return"] + 2.0
    png = plot_episodes(scores, settings.service_radius, tmp_path / "t.png")
    gif = episode_gif(scores["scripted planner"], settings.service_radius, tmp_path / "e.gif")
    assert png.read_bytes()[:4] == b"\x89PNG" and gif.read_bytes()[:3] == b"GIF"


def test_run_episodes_scores_one_full_episode_per_environment() -> None:
    settings = EnvSettings(n_uav=4, horizon=6)
    env = UAVEnv(settings, SceneDistribution(), 32, CPU, seed=5)
    env.generator.manual_seed(5)
    scores = run_episodes(env, scripted_planner)
    assert scores.trajectory.shape[1:] == (4, 2) and 2 <= len(scores.trajectory) <= 7  # start + up to 6 steps
    env.generator.manual_seed(5)
    env.reset()
    total = torch.zeros(32)
    alive = torch.ones(32, dtype=torch.bool)
    for _ in range(6):
        step = env.step(scripted_planner(env))
        total += step.task_reward.sum(1) * alive
        alive &= ~step.done
    torch.testing.assert_close(scores.episode_return, total)


@pytest.mark.parametrize("scale", ["side", "range"])
def test_observed_distances_are_in_the_scale_asked_at_any_swarm_size(scale: str) -> None:
    """``env.obs_scale``: a UAV's nearest target is observed at its distance over the arena's side (which grows
    with the swarm) or over the UAVs' largest range (the same at 4 and 64 UAVs: what a policy trained small reads
    at scale); the UAV's own position stays a share of the arena."""
    from uavgnn.problem.observation import SELF_FEATURES

    dist = SceneDistribution()
    for n_uav in (4, 64):
        env = UAVEnv(EnvSettings(n_uav=n_uav, obs_scale=scale), dist, 2, torch.device("cpu"), seed=0)
        obs = env.observe()
        nearest = (env.target_pos[:, None] - env.pos[:, :, None]).norm(dim=-1).min(-1).values  # all open at t=0
        unit = env.side if scale == "side" else dist.range_max
        torch.testing.assert_close(obs[..., SELF_FEATURES + 2], nearest / unit)
        torch.testing.assert_close(obs[..., SELF_FEATURES - 2 : SELF_FEATURES], env.pos / env.side)
