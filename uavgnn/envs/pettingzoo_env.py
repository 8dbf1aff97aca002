"""The UAV environment through the standard multi-agent API: a PettingZoo ``ParallelEnv`` (optional dependency:
``pip install pettingzoo``, or ``uavgnn[pettingzoo]``).

One environment of ``settings.n_uav`` UAVs, agents ``uav_0``... Each step every UAV acts at once; a reward is
the training reward of ``UAVEnv.step`` (the task's plus the approach hint and the team share; the task's own is
in ``infos[agent]["task_reward"]``). An episode ends for all UAVs together: terminated when every target is
completed, truncated at ``settings.horizon``; then ``agents`` is empty until ``reset``. ``state()`` is the
centralised critic's global state. ``render_mode="rgb_array"``: ``render()`` is an (H, W, 3) uint8 picture of the
episode so far (``uavgnn.reporting.episodes``'s: the UAVs' paths, the targets' service radii, filled once completed);
without a render mode ``render()`` warns and returns None. ``step`` checks every action before it touches anything
and refuses a bad one with an ``ActionError`` naming the agent, the value and what the action space allows. The batched
``UAVEnv`` underneath is what MASAC and COMA train on, so a policy trained here sees the same dynamics.

    from uavgnn.envs.pettingzoo_env import UAVParallelEnv
    env = UAVParallelEnv(EnvSettings(n_uav=4), SceneDistribution(), render_mode="rgb_array")
    obs, infos = env.reset(seed=0)
    while env.agents:
        obs, rewards, terminations, truncations, infos = env.step(
            {agent: env.action_space(agent).sample() for agent in env.agents})
    frame = env.render()  # (360, 360, 3) uint8
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from uavgnn.envs.policies import EpisodeScores
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import make_env
from uavgnn.problem.scenes import SceneDistribution

try:
    from gymnasium import logger, spaces
    from pettingzoo import ParallelEnv

    from uavgnn.envs.spaces import action_space, observation_space
except ImportError as err:  # an optional dependency: say how to get it
    raise ImportError(
        "uavgnn.envs.pettingzoo_env needs PettingZoo: pip install pettingzoo (or pip install 'uavgnn[pettingzoo]')"
    ) from err


class ActionError(ValueError):
    """An action ``step`` refuses (unknown agent, wrong type or shape, non-finite, outside the action space), named
    with the agent, the value and what is allowed; the environment is left as it was before the call."""


def _show(value: Any) -> str:
    """A refused value on one line (an error message is one line): the numbers when few, else the shape."""
    array = np.asarray(value) if isinstance(value, np.ndarray) else None
    if array is not None and array.size > 8:
        return f"an array of shape {array.shape}"
    text = " ".join(repr(array.tolist() if array is not None else value).split())
    return text if len(text) <= 80 else text[:77] + "..."


class UAVParallelEnv(ParallelEnv):
    """``UAVEnv`` with one environment, as a PettingZoo parallel environment (see the module's docstring)."""

    metadata = {"name": "uavgnn_uav_v0", "render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(
        self, settings: EnvSettings, dist: SceneDistribution, seed: int = 0, render_mode: str | None = None
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode={render_mode!r}: expected None or one of {self.metadata['render_modes']}")
        self.settings, self.dist, self.seed, self.render_mode = settings, dist, seed, render_mode
        self.possible_agents = [f"uav_{i}" for i in range(settings.n_uav)]
        self.agents: list[str] = []
        self.env = make_env(settings, dist, 1, torch.device("cpu"), seed, auto_reset=False)
        self._state = np.zeros(settings.state_dim(dist), dtype=np.float32)
        self._path = [self.env.pos[0].clone()]  # the UAVs' positions since the episode began, for render()
        self._target_path = [self.env.target_pos[0].clone()]  # and the targets' (they move with target_speed)
        self._observation_space = observation_space(settings)
        self._action_space = action_space(settings)

    def observation_space(self, agent: str) -> spaces.Box:
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Space:
        """Continuous: a velocity command in [-1, 1]^2; discrete: stay or one of 8 headings; goto: stay or the
        k-th nearest open target (then home, with goto_home; the same object every call, as PettingZoo asks)."""
        return self._action_space

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
        self._path, self._target_path = [self.env.pos[0].clone()], [self.env.target_pos[0].clone()]
        self.agents = self.possible_agents[:]
        self._state = state[0].numpy()
        return self._per_agent(obs[0]), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        """Every live UAV's action at once; a UAV without one hovers (continuous: zero velocity; else stay)."""
        if not self.agents:
            raise RuntimeError("step() after the episode ended: call reset() first")
        action = self._checked_actions(actions)
        step = self.env.step(action[None])
        self._path.append(step.positions[0].clone())
        self._target_path.append(step.target_positions[0].clone())
        self._state = step.state[0].numpy()
        done = bool(step.done[0])
        completed = bool(step.episode_completion[0] >= 1.0)  # else the horizon ended it
        agents = self.agents
        rewards = {a: float(step.reward[0, i]) for i, a in enumerate(self.possible_agents) if a in agents}
        infos = {
            a: {"task_reward": float(step.task_reward[0, i])} for i, a in enumerate(self.possible_agents) if a in agents
        }
        terminations = {a: done and completed for a in agents}
        truncations = {a: done and not completed for a in agents}
        observations = {a: o for a, o in self._per_agent(step.obs[0]).items() if a in agents}
        if done:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def render(self) -> np.ndarray | None:
        """``render_mode="rgb_array"``: the episode so far as an (H, W, 3) uint8 array, drawn as the run
        directories' pictures are (``uavgnn.reporting.episodes``); no render mode: a warning and None, as PettingZoo's
        environments do."""
        if self.render_mode is None:
            logger.warn("render() without a render mode: create UAVParallelEnv(..., render_mode='rgb_array')")
            return None
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        from uavgnn.reporting.episodes import draw_episode  # the run directories' pictures' drawing

        radius = self.settings.service_radius
        scores = EpisodeScores(
            *(torch.zeros(1) for _ in range(3)),
            torch.stack(self._path),
            torch.stack(self._target_path),
            self.env.need[0].clone(),
        )
        fig = Figure(figsize=(4.5, 4.5), dpi=80)
        canvas = FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        draw_episode(ax, scores, radius)
        ax.set_xlim(-radius, self.env.side + radius)
        ax.set_ylim(-radius, self.env.side + radius)
        ax.set_title(f"step {len(self._path) - 1} of {self.settings.horizon}", fontsize=10)
        canvas.draw()
        return np.asarray(canvas.buffer_rgba())[..., :3].copy()

    def _checked_actions(self, actions: Mapping[str, Any]) -> torch.Tensor:
        """(N, 2) float or (N,) long tensor of every UAV's action, hover for a UAV without one; raises
        ``ActionError`` on the first bad entry. Checked whole before ``UAVEnv.step`` runs: the simulator clamps
        a NaN into the state for good and indexes its headings with a discrete action (-1 silently flies
        heading 8, 99 fails deep inside), so a bad action must never reach it."""
        if not isinstance(actions, Mapping):
            raise ActionError(f"step() takes a dict {{agent: action}}, got {type(actions).__name__}")
        live = set(self.agents)
        unknown = [agent for agent in actions if agent not in live]
        if unknown:
            raise ActionError(
                f"action {_show(actions[unknown[0]])} for unknown agent {unknown[0]!r}: "
                f"the live agents are {self.agents}"
            )
        space = self.action_space(self.possible_agents[0])
        continuous = isinstance(space, spaces.Box)
        shape = space.shape if continuous else ()
        kinds = "iuf" if continuous else "iu"
        allowed = (
            f"a finite array of shape {shape} in [{float(space.low.min())}, {float(space.high.max())}]"
            if continuous
            else f"an integer in [{space.start}, {space.start + space.n})"
        )
        hover = np.zeros(shape, np.float32) if continuous else np.int64(0)
        chosen = []
        for agent in self.possible_agents:  # once over the agents: type and shape; the values below, all at once
            value = actions.get(agent, hover)
            try:
                array = np.asarray(value)
            except (TypeError, ValueError, RuntimeError):
                raise ActionError(f"action for {agent!r} is {_show(value)}: expected {allowed}") from None
            if array.shape != shape or array.dtype.kind not in kinds:
                shown = _show(array) if array.dtype.kind in "biufc" else _show(value)
                detail = array.dtype if shown.startswith("an array") else f"{array.dtype}, shape {array.shape}"
                raise ActionError(f"action for {agent!r} is {shown} ({detail}): expected {allowed}")
            chosen.append(array)
        stacked = np.stack(chosen).astype(np.float64)  # (N, *shape); exact for every int a range check needs
        if continuous:
            bad = ~(np.isfinite(stacked) & (stacked >= space.low) & (stacked <= space.high))
        else:
            bad = (stacked < space.start) | (stacked >= space.start + space.n)
        if bad.any():
            first = int(np.flatnonzero(bad.reshape(len(chosen), -1).any(1))[0])
            raise ActionError(
                f"action for {self.possible_agents[first]!r} is {_show(chosen[first])}: expected {allowed}"
            )
        dtype = torch.float32 if continuous else torch.long
        return torch.as_tensor(np.stack(chosen), dtype=dtype)

    def _per_agent(self, obs: torch.Tensor) -> dict[str, np.ndarray]:
        return {agent: obs[i].numpy() for i, agent in enumerate(self.possible_agents)}
