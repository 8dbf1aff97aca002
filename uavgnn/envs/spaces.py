"""One UAV's observation and action spaces as Gymnasium states them: what the PettingZoo and Stable-Baselines3
views of the environment declare (Gymnasium comes with either)."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from uavgnn.envs.settings import EnvSettings


def observation_space(settings: EnvSettings) -> spaces.Box:
    """What one UAV observes (``UAVEnv.observe``): unbounded floats."""
    return spaces.Box(-np.inf, np.inf, (settings.obs_dim(),), np.float32)


def action_space(settings: EnvSettings) -> spaces.Space:
    """Continuous: a velocity command in [-1, 1]^2; discrete: stay or one of 8 headings; goto: stay or the k-th
    nearest open target (then home, with goto_home)."""
    if settings.action == "continuous":
        return spaces.Box(-1.0, 1.0, (2,), np.float32)
    return spaces.Discrete(settings.action_dim())
