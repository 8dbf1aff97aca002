"""The Python API, for scripts and notebooks (no Hydra): one import for what a researcher does with uavgnn
outside ``run.py``. The README's "From Python" example runs in the tests (``tests/test_api.py``).

Scenes and solvers:
    ``generate_scenes(SceneDistribution(), n_uav, count, seed)``, ``load_scene(path)`` / ``save_scene``, and
    ``solve(scene, "milp" | "greedy" | "lap" | "mcf")`` -> ``SolveResult`` (assignment, objective, status).
A trained assignment policy:
    ``load_policy(best.pt)`` -> (model, graph settings, config); ``load_policy("pretrained")``: the 16-UAV
    policy shipped in the package; ``solve_with_model(model, scene, graph)`` -> (``SolveResult``, timings): any
    scene size; ``export_policy(best.pt, new.pt)``: its weights, config and graph settings alone, to share.
A trained environment policy:
    ``load_env_policy(best.pt)`` -> (policy, config); ``play(policy, config, episodes, seed)`` -> the episodes'
    ``EpisodeScores`` (return, completion, collisions, environment 0's trajectory), on the environment it was
    trained in. The environment itself: ``UAVEnv``, or ``uavgnn.envs.pettingzoo_env.UAVParallelEnv``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from uavgnn.algorithms.env_policy import load_env_policy as _load_env_policy
from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.checkpoints import export_policy
from uavgnn.envs.policies import EpisodeScores, Policy, run_episodes
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import UAVEnv, make_env
from uavgnn.inference.scene import solve_with_model
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.scene_io import load_scene, save_scene
from uavgnn.problem.scenes import Scene, SceneDistribution
from uavgnn.settings import env_settings, scene_distribution
from uavgnn.solvers import solve

__all__ = ["EnvSettings", "EpisodeScores", "Scene", "SceneDistribution", "UAVEnv", "export_policy",
           "generate_scenes", "load_env_policy", "load_policy", "load_scene", "play", "save_scene", "solve",
           "solve_with_model"]


def load_env_policy(path: str | Path) -> tuple[Policy, Any]:
    """An environment policy's checkpoint as a policy (greedy actions) and the config it was trained with."""
    return _load_env_policy(path, "load_env_policy")


def play(policy: Policy, config: Any, episodes: int = 64, seed: int = 0) -> EpisodeScores:
    """``episodes`` full episodes of ``policy`` at once, in the environment and scenes of ``config`` (a
    checkpoint's, from ``load_env_policy``)."""
    env = make_env(env_settings(config), scene_distribution(config), episodes, torch.device("cpu"), seed)
    return run_episodes(env, policy)
