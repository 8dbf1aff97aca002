"""The UAV environment through PettingZoo's parallel API: PettingZoo's own API test, and the same episodes,
rewards and endings as ``UAVEnv`` itself."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from pettingzoo.test import parallel_api_test

from uavgnn.envs.pettingzoo_env import UAVParallelEnv
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.problem.scenes import SceneDistribution


@pytest.mark.parametrize("action", ["continuous", "discrete", "goto"])
def test_pettingzoos_own_parallel_api_test_passes(action) -> None:
    env = UAVParallelEnv(EnvSettings(n_uav=3, horizon=12, action=action), SceneDistribution())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the API test reports a misbehaving environment by warnings too
        parallel_api_test(env, num_cycles=40)


def test_the_parallel_view_plays_the_episodes_of_uav_env_itself() -> None:
    """Same seed and actions: the observations, rewards and the end of the episode are UAVEnv's; every agent
    leaves together when it ends, truncated at the horizon."""
    settings, dist = EnvSettings(n_uav=3, horizon=6), SceneDistribution()
    view = UAVParallelEnv(settings, dist)
    direct = UAVEnv(settings, dist, 1, torch.device("cpu"), seed=7, auto_reset=False)  # ends on the final obs
    obs, _ = view.reset(seed=7)
    first, state = direct.reset()
    np.testing.assert_array_equal(obs["uav_1"], first[0, 1].numpy())
    np.testing.assert_array_equal(view.state(), state[0].numpy())
    actions = torch.tensor([[[1.0, 0.0], [0.0, -1.0], [-0.5, 0.5]]])
    for t in range(settings.horizon):
        assert view.agents == ["uav_0", "uav_1", "uav_2"]
        obs, rewards, terminated, truncated, infos = view.step(
            {f"uav_{i}": actions[0, i].numpy() for i in range(3)})
        step = direct.step(actions)
        assert rewards == {f"uav_{i}": float(step.reward[0, i]) for i in range(3)}
        assert infos["uav_2"]["task_reward"] == float(step.task_reward[0, 2])
        np.testing.assert_array_equal(obs["uav_0"], step.obs[0, 0].numpy())
        assert set(truncated.values()) == {t == settings.horizon - 1 and bool(step.episode_completion[0] < 1)}
    assert view.agents == [] and not any(terminated.values())
    with pytest.raises(RuntimeError, match="call reset"):
        view.step({})
