"""The UAV environment for Stable-Baselines3 (optional dependency: ``pip install 'uavgnn[sb3]'``).

``UAVVecEnv``: every (environment, UAV) pair is one slot of an SB3 ``VecEnv``, so SB3's PPO (or A2C, DQN...)
trains one policy that every UAV shares, on its own observation and its own training reward (parameter
sharing). SuperSuit builds the same from the PettingZoo view,
``concat_vec_envs_v1(pettingzoo_env_to_vec_env_v1(UAVParallelEnv(...)), n, base_class="stable_baselines3")``,
stepping each environment in Python (~1 ms a step); this steps all of them in one batched ``UAVEnv.step``
(the tests check the two agree step by step). An episode ends for all UAVs of an environment together and starts
afresh inside ``step``; the time left is observed, so the horizon is a true end: no slot reports
``TimeLimit.truncated`` and SB3 bootstraps nothing past an end. ``shared_policy`` plays a trained SB3 model as a
``uavgnn`` policy, so it is scored on the same test episodes as every other method
(``uavgnn.evaluation.episodes.compare_policies``).

    from stable_baselines3 import PPO
    from uavgnn.envs.sb3_vec_env import UAVVecEnv, shared_policy
    venv = UAVVecEnv(EnvSettings(n_uav=4, action="goto"), SceneDistribution(), n_envs=256, seed=0)
    model = PPO("MlpPolicy", venv, n_steps=25, batch_size=6400).learn(1_000_000)
    policy = shared_policy(model)  # env -> actions, greedy
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from uavgnn.envs.policies import Policy
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.spaces import action_space, observation_space
from uavgnn.envs.uav_env import UAVEnv, make_env
from uavgnn.problem.scenes import SceneDistribution

try:
    from stable_baselines3.common.base_class import BaseAlgorithm
    from stable_baselines3.common.vec_env import VecEnv
except ImportError as err:  # an optional dependency: say how to get it
    raise ImportError(
        "uavgnn.envs.sb3_vec_env needs Stable-Baselines3: pip install stable-baselines3 (or pip install 'uavgnn[sb3]')"
    ) from err


class UAVVecEnv(VecEnv):
    """``n_envs`` environments of ``settings.n_uav`` UAVs as ``n_envs * n_uav`` SB3 slots, environment-major
    (slot ``e * n_uav + i`` is UAV ``i`` of environment ``e``)."""

    def __init__(
        self,
        settings: EnvSettings,
        dist: SceneDistribution,
        n_envs: int,
        seed: int = 0,
        device: torch.device | str = "cpu",
    ) -> None:
        self.env: UAVEnv = make_env(settings, dist, n_envs, device, seed)
        self.settings = settings
        super().__init__(n_envs * settings.n_uav, observation_space(settings), action_space(settings))
        self._actions: torch.Tensor | None = None

    def reset(self) -> np.ndarray:
        """Fresh episodes in every environment; a seed given by ``seed()`` (SB3 gives its own) restarts the
        environments' random stream first."""
        if self._seeds[0] is not None:
            self.env.generator.manual_seed(int(self._seeds[0]))
        self._reset_seeds()
        obs, _ = self.env.reset()
        return self._flat(obs)

    def step_async(self, actions: np.ndarray) -> None:
        shape = (self.env.n_envs, self.env.n_uav, *self.action_space.shape)
        self._actions = torch.as_tensor(actions, device=self.env.device).reshape(shape)
        if self.settings.action != "continuous":
            self._actions = self._actions.long()

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        if self._actions is None:
            raise RuntimeError("step_wait() without step_async(actions)")
        step = self.env.step(self._actions)
        self._actions = None
        done = step.done[:, None].expand(-1, self.env.n_uav).reshape(-1).cpu().numpy()
        reward = step.reward.reshape(-1).float().cpu().numpy()
        return self._flat(step.obs), reward, done, [{} for _ in range(self.num_envs)]

    def close(self) -> None:
        """Nothing to release: the environments are tensors."""

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        """The batched environment's attribute, once per slot asked for (every slot shares it); no
        ``render_mode``: SB3 renders nothing here (``UAVParallelEnv.render`` draws an episode)."""
        value = None if attr_name == "render_mode" else getattr(self.env, attr_name)
        return [value] * len(self._get_indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        setattr(self.env, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any) -> list[Any]:
        """Calls the batched environment's method once; its result stands for every slot asked for."""
        result = getattr(self.env, method_name)(*method_args, **method_kwargs)
        return [result] * len(self._get_indices(indices))

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False] * len(self._get_indices(indices))

    def _flat(self, obs: torch.Tensor) -> np.ndarray:
        return obs.reshape(self.num_envs, -1).float().cpu().numpy()

    def _get_indices(self, indices: Any) -> Sequence[int]:
        if indices is None:
            return range(self.num_envs)
        return [indices] if isinstance(indices, int) else list(indices)


def shared_policy(model: BaseAlgorithm) -> Policy:
    """A trained SB3 model acting for every UAV of a ``UAVEnv`` from that UAV's observation, greedily."""

    def act(env: UAVEnv) -> torch.Tensor:
        obs = env.observe()
        action, _ = model.predict(obs.reshape(-1, obs.shape[-1]).cpu().numpy(), deterministic=True)
        action = torch.as_tensor(action, device=env.device)
        if env.cfg.action == "continuous":
            return action.float().reshape(env.n_envs, env.n_uav, 2)
        return action.long().reshape(env.n_envs, env.n_uav)

    return act
