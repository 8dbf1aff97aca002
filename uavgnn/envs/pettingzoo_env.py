"""The UAV environment through the standard multi-agent API: a PettingZoo ``ParallelEnv`` (optional dependency:
``pip install pettingzoo``, or ``uavgnn[pettingzoo]``).

One environment of ``settings.n_uav`` UAVs, agents ``uav_0``... Each step every UAV acts at once; a reward is
the training reward of ``UAVEnv.step`` (the task's plus the approach hint and the team share; the task's own is
in ``infos[agent]["task_reward"]``). An episode ends for all UAVs together: terminated when every target is
completed, truncated at ``settings.horizon``; then ``agents`` is empty until ``reset``. ``state()`` is the
centralised critic's global state. The batched ``UAVEnv`` underneath is what MASAC and COMA train on, so a
policy trained here sees the same dynamics.

    from uavgnn.envs.pettingzoo_env import UAVParallelEnv
    env = UAVParallelEnv(EnvSettings(n_uav=4), SceneDistribution())
    obs, infos = env.reset(seed=0)
    while env.agents:
        obs, rewards, terminations, truncations, infos = env.step(
            {agent: env.action_space(agent).sample() for agent in env.agents})
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from uavgnn.envs.settings import N_DISCRETE, EnvSettings
from uavgnn.envs.uav_env import make_env
from uavgnn.problem.scenes import SceneDistribution

try:
    from gymnasium import spaces
    from pettingzoo import ParallelEnv
except ImportError as err:  # an optional dependency: say how to get it
    raise ImportError("uavgnn.envs.pettingzoo_env needs PettingZoo: pip install pettingzoo "
                      "(or pip install 'uavgnn[pettingzoo]')") from err


class UAVParallelEnv(ParallelEnv):
    """``UAVEnv`` with one environment, as a PettingZoo parallel environment (see the module's docstring)."""

    metadata = {"name": "uavgnn_uav_v0", "render_modes": []}

    def __init__(self, settings: EnvSettings, dist: SceneDistribution, seed: int = 0) -> None:
        self.settings, self.dist, self.seed = settings, dist, seed
        self.possible_agents = [f"uav_{i}" for i in range(settings.n_uav)]
        self.agents: list[str] = []
        self.env = make_env(settings, dist, 1, torch.device("cpu"), seed, auto_reset=False)
        self._state = np.zeros(settings.state_dim(dist), dtype=np.float32)

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent: str) -> spaces.Box:
        return spaces.Box(-np.inf, np.inf, (self.settings.obs_dim(),), np.float32)

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent: str) -> spaces.Space:
        """Continuous: a velocity command in [-1, 1]^2; discrete: stay or one of 8 headings; goto: stay or the
        k-th nearest open target."""
        if self.settings.action == "continuous":
            return spaces.Box(-1.0, 1.0, (2,), np.float32)
        return spaces.Discrete(N_DISCRETE if self.settings.action == "discrete" else 1 + self.settings.obs_targets)

    @property
    def state_space(self) -> spaces.Box:
        return spaces.Box(-np.inf, np.inf, self._state.shape, np.float32)

    def state(self) -> np.ndarray:
        """The global state (every UAV and target, absolute; time): what a centralised critic reads."""
        return self._state

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """A fresh episode; ``seed`` restarts the environment's random stream (the same seed, the same episodes)."""
        if seed is not None:
            self.env = make_env(self.settings, self.dist, 1, torch.device("cpu"), seed, auto_reset=False)
        obs, state = self.env.reset()
        self.agents = self.possible_agents[:]
        self._state = state[0].numpy()
        return self._per_agent(obs[0]), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        """Every live UAV's action at once; a UAV without one hovers (continuous: zero velocity; else stay)."""
        if not self.agents:
            raise RuntimeError("step() after the episode ended: call reset() first")
        hover = np.zeros(2, np.float32) if self.settings.action == "continuous" else 0
        chosen = np.stack([np.asarray(actions.get(agent, hover)) for agent in self.possible_agents])
        action = torch.as_tensor(chosen, dtype=torch.float32 if self.settings.action == "continuous" else torch.long)
        step = self.env.step(action[None])
        self._state = step.state[0].numpy()
        done = bool(step.done[0])
        completed = bool(step.episode_completion[0] >= 1.0)  # else the horizon ended it
        agents = self.agents
        rewards = {a: float(step.reward[0, i]) for i, a in enumerate(self.possible_agents) if a in agents}
        infos = {a: {"task_reward": float(step.task_reward[0, i])} for i, a in enumerate(self.possible_agents)
                 if a in agents}
        terminations = {a: done and completed for a in agents}
        truncations = {a: done and not completed for a in agents}
        observations = {a: o for a, o in self._per_agent(step.obs[0]).items() if a in agents}
        if done:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def _per_agent(self, obs: torch.Tensor) -> dict[str, np.ndarray]:
        return {agent: obs[i].numpy() for i, agent in enumerate(self.possible_agents)}
