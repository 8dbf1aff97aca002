"""The UAV environment for Stable-Baselines3: the same slots, rewards and endings as SuperSuit makes of the
PettingZoo view, and SB3's own PPO learning on it."""

from __future__ import annotations

import numpy as np
import pytest
import supersuit
import torch
from stable_baselines3 import PPO

from uavgnn.envs.pettingzoo_env import UAVParallelEnv
from uavgnn.envs.sb3_vec_env import UAVVecEnv, shared_policy
from uavgnn.envs.settings import EnvSettings
from uavgnn.evaluation.episodes import compare_policies
from uavgnn.problem.scenes import SceneDistribution


@pytest.mark.parametrize("action", ["continuous", "goto"])
def test_the_batched_slots_are_what_supersuit_makes_of_the_pettingzoo_view(action) -> None:
    """One environment, the same seed and actions: SuperSuit's vector environment over ``UAVParallelEnv`` (its
    standard route to SB3, stepping in Python) and ``UAVVecEnv`` see the same observations, rewards and ending,
    slot for slot; then the next episode ends a horizon later, every UAV's slot with it."""
    settings, dist = EnvSettings(n_uav=3, horizon=5, action=action), SceneDistribution()
    theirs = supersuit.concat_vec_envs_v1(
        supersuit.pettingzoo_env_to_vec_env_v1(UAVParallelEnv(settings, dist, seed=11)),
        1,
        base_class="stable_baselines3",
    )
    ours = UAVVecEnv(settings, dist, n_envs=1, seed=11)
    assert (ours.num_envs, ours.observation_space, ours.action_space) == (
        theirs.num_envs,
        theirs.observation_space,
        theirs.action_space,
    )
    np.testing.assert_array_equal(ours.reset(), theirs.reset())
    rng = np.random.default_rng(0)
    dones = []
    for t in range(2 * settings.horizon):
        actions = rng.uniform(-1, 1, (3, 2)).astype(np.float32) if action == "continuous" else rng.integers(0, 5, 3)
        obs, reward, done, _ = ours.step(actions)
        dones.append(done.tolist())
        if t < settings.horizon:  # the first episode, seeded alike (the next one's scenes are drawn differently)
            their_obs, their_reward, their_done, _ = theirs.step(actions)
            np.testing.assert_allclose(reward, their_reward, rtol=1e-6, atol=1e-7)
            np.testing.assert_array_equal(done, their_done.astype(bool))
            if not done[0]:  # at the end both show a fresh episode's first observation
                np.testing.assert_array_equal(obs, their_obs)
    ended = [t + 1 for t, done in enumerate(dones) if any(done)]
    assert ended == [settings.horizon, 2 * settings.horizon]  # no target completed: each ran to the horizon
    assert all(all(done) == any(done) for done in dones)


def test_sb3_ppo_with_parameter_sharing_learns_to_beat_random_actions() -> None:
    """A short SB3 PPO run (8 collections of 64 environments) and the random policy on the same 128 test
    episodes: the learned shared policy takes a clearly larger share of the scripted planner's return."""
    settings, dist = EnvSettings(n_uav=4, action="goto", team_weight=1.0, approach_reward=0.0), SceneDistribution()
    torch.manual_seed(0)
    model = PPO("MlpPolicy", UAVVecEnv(settings, dist, n_envs=64, seed=0), n_steps=25, batch_size=1600, seed=0)
    model.learn(8 * 64 * 25 * settings.n_uav)
    rows, _ = compare_policies({"ppo": shared_policy(model)}, settings, dist, 128, torch.device("cpu"))
    share = {row["method"]: row["of_planner"] for row in rows}
    assert share["ppo"] > share["random"] + 0.3, share
