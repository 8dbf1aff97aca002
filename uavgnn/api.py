"""The Python API, for scripts and notebooks: one import for what a researcher does with uavgnn outside
``run.py``. The documented example (docs/python-api.md) runs in the tests (``tests/test_api.py``).

Training:
    ``train(["algorithm=mappo", "train.steps=2000"])`` -> (run directory, ``summary.json``): the run
    ``uavgnn algorithm=mappo train.steps=2000`` makes (Hydra's compose API over the packaged configs), in the same
    run directory layout (``outputs/<date>/<time>``, or ``run_dir=``) with the same record, checkpoints and results.
Scenes and solvers:
    ``generate_scenes(SceneDistribution(), n_uav, count, seed)``, ``load_scene(path)`` / ``save_scene``,
    ``solve(scene, "milp" | "greedy" | "lap" | "mcf")`` -> ``SolveResult`` (assignment, objective, status), and
    ``scene_bound(scene)`` -> ``Bound``: a certified upper bound on the optimum, at any scale (its ``value``,
    ``kind``, ``seconds``): ``(bound.value - result.objective) / bound.value`` is how far from the optimum at most.
A trained assignment policy (algorithm=imitation, imitation_reinforce, reinforce):
    ``load_policy(best.pt)`` -> (model, graph settings, config); ``load_policy("pretrained")``: the 16-UAV
    policy shipped in the package; ``solve_with_model(model, scene, graph)`` -> (``SolveResult``, timings): any
    scene size; ``export_policy(best.pt, new.pt)``: its weights, config and graph settings alone, to share.
A trained environment policy (MAPPO, MASAC or COMA: algorithm=mappo, masac, coma):
    ``load_env_policy(best.pt)`` -> (policy, config); ``play(policy, config, episodes, seed)`` -> the episodes'
    ``EpisodeScores`` (return, completion, collisions, environment 0's trajectory), on the environment it was
    trained in. The environment itself: ``UAVEnv``, or ``uavgnn.envs.pettingzoo_env.UAVParallelEnv`` (PettingZoo;
    ``render_mode="rgb_array"`` draws it). Each loader refuses the other's checkpoint in one line naming the other.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from uavgnn.algorithms.base import Product
from uavgnn.algorithms.env_policy import PRODUCT as ENV_POLICY
from uavgnn.algorithms.env_policy import load_env_policy as _load_env_policy
from uavgnn.algorithms.registry import making, produces
from uavgnn.algorithms.scene_policy import PRODUCT as ASSIGNMENT_POLICY
from uavgnn.algorithms.scene_policy import load_policy as _load_policy
from uavgnn.config.settings import env_settings, scene_distribution
from uavgnn.envs.policies import EpisodeScores, Policy, run_episodes
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import UAVEnv, make_env
from uavgnn.inference.scene import solve_with_model
from uavgnn.infrastructure.errors import CheckpointError, ConfigError
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.scene_io import load_scene, save_scene
from uavgnn.problem.scenes import Scene, SceneDistribution
from uavgnn.runs.checkpoints import export_policy, kind, load_checkpoint
from uavgnn.runs.layout import SUMMARY
from uavgnn.solvers import solve
from uavgnn.solvers.bound import Bound, scene_bound

__all__ = [
    "Bound",
    "EnvSettings",
    "EpisodeScores",
    "Scene",
    "SceneDistribution",
    "TrainedRun",
    "UAVEnv",
    "export_policy",
    "generate_scenes",
    "load_env_policy",
    "load_policy",
    "load_scene",
    "play",
    "save_scene",
    "scene_bound",
    "solve",
    "solve_with_model",
    "train",
]


class TrainedRun(NamedTuple):
    """What ``train`` returns: the run directory and its ``summary.json`` (best validation figures, the test table,
    the run manifest)."""

    run_dir: Path
    summary: dict[str, Any]


def train(overrides: Sequence[str] = (), run_dir: str | Path | None = None) -> TrainedRun:
    """Train as ``uavgnn <overrides>`` (``python run.py <overrides>``) does: the config composed by Hydra's compose
    API from the packaged configs and the same overrides, run by the same code, into the same run directory
    (``outputs/<date>/<time>`` under the working directory, or ``run_dir``, as ``hydra.run.dir=``) with the same
    ``.hydra/`` record, ``run.log``, checkpoints, ``metrics.jsonl`` and ``summary.json``
    (``uavgnn.program.from_python.run``). A
    user error (an override that does not compose, a checkpoint or directory refused, a run that diverged) is
    raised as itself (``ConfigError``, ``CheckpointError``, ...) once its one line is said, and a refused run
    leaves no directory."""
    from uavgnn.program.from_python import run

    overrides = [str(override) for override in overrides]
    modes = [o for o in overrides if o.lstrip("+~").split("=", 1)[0] == "mode" and o.split("=", 1)[-1] != "train"]
    if modes:
        raise ConfigError(f"{modes[0]}: train() runs mode=train; leave it out (run other modes with uavgnn)")
    out = run(overrides, run_dir)
    summary = out / SUMMARY
    return TrainedRun(out, json.loads(summary.read_text()) if summary.exists() else {})


def load_policy(path: str | Path, device: torch.device | str = "cpu") -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """An assignment policy's checkpoint (``algorithm=imitation``, ``imitation_reinforce``, ``reinforce``;
    ``"pretrained"``: the one in the package) as (model, graph settings, config); an environment policy's (MAPPO,
    MASAC, COMA) is refused in one line naming ``load_env_policy``."""
    try:
        return _load_policy(path, device, "load_policy")
    except CheckpointError:
        _other_loader(path, ENV_POLICY, "load_env_policy", "load_policy", ASSIGNMENT_POLICY)
        raise


def load_env_policy(path: str | Path) -> tuple[Policy, Any]:
    """An environment policy's checkpoint (MAPPO, MASAC, COMA) as a policy (greedy actions) and the config it was
    trained with; an assignment policy's is refused in one line naming ``load_policy``."""
    try:
        return _load_env_policy(path, "load_env_policy")
    except CheckpointError:
        _other_loader(path, ASSIGNMENT_POLICY, "load_policy", "load_env_policy", ENV_POLICY)
        raise


def _other_loader(path: str | Path, product: Product, loader: str, refused_by: str, takes: Product) -> None:
    """A ``CheckpointError`` naming ``loader`` when the checkpoint at ``path`` is a ``product`` (the other loader's
    kind); nothing otherwise (the loader's own error stands)."""
    try:
        config = load_checkpoint(path)["config"]
    except CheckpointError:
        return
    if produces(config) == product:
        raise CheckpointError(
            f"checkpoint {path} ({kind(config)}) is {product.with_article}: {loader}({str(path)!r}) loads it; "
            f"{refused_by} takes {takes.with_article} ({making(takes)})"
        ) from None


def play(policy: Policy, config: Any, episodes: int = 64, seed: int = 0) -> EpisodeScores:
    """``episodes`` full episodes of ``policy`` at once, in the environment and scenes of ``config`` (a
    checkpoint's, from ``load_env_policy``)."""
    env = make_env(env_settings(config), scene_distribution(config), episodes, torch.device("cpu"), seed)
    return run_episodes(env, policy)
