"""Scenes drawn from a ``SceneDistribution`` (the ``task`` group): numpy for uniform and clustered splits, the
device generator of ``scene_batch`` for ``task=mixed`` (one definition of that distribution)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from uavgnn.infrastructure.errors import ConfigError
from uavgnn.infrastructure.user_code import import_named, source_digest
from uavgnn.problem.scene_batch import generate_scene_batch
from uavgnn.problem.scenes import Scene, SceneDistribution


def generate_scenes(dist: SceneDistribution, n_uav: int, count: int, seed: int) -> list[Scene]:
    """``count`` scenes of ``n_uav`` UAVs, drawn at once with numpy (no per-scene loop
    beyond wrapping the arrays), or by ``dist.generator``. The same (dist, n_uav, count, seed) gives the same
    scenes."""
    if n_uav < 1 or count < 0:
        raise ValueError(f"generate_scenes: need n_uav >= 1 and count >= 0, got n_uav={n_uav}, count={count}")
    if dist.generator is not None:
        return _custom_scenes(dist, n_uav, count, seed)
    if dist.positions == "mixed":
        return _mixed_scenes(dist, n_uav, count, seed)
    rng = np.random.default_rng(seed)
    n_target = dist.n_targets(n_uav)
    side = dist.side(n_uav)
    if dist.positions == "uniform":
        uav_pos = rng.uniform(0.0, side, size=(count, n_uav, 2))
        target_pos = rng.uniform(0.0, side, size=(count, n_target, 2))
    elif dist.positions == "clustered":
        n_clusters = max(1, math.ceil(n_target / dist.cluster_size))
        centres = rng.uniform(0.0, side, size=(count, n_clusters, 2))
        scene_idx = np.arange(count)[:, None]
        target_cluster = rng.integers(0, n_clusters, size=(count, n_target))
        uav_cluster = rng.integers(0, n_clusters, size=(count, n_uav))
        target_pos = centres[scene_idx, target_cluster] + rng.normal(0.0, dist.cluster_std, (count, n_target, 2))
        uav_pos = centres[scene_idx, uav_cluster] + rng.normal(0.0, dist.uav_spread, (count, n_uav, 2))
        np.clip(target_pos, 0.0, side, out=target_pos)
        np.clip(uav_pos, 0.0, side, out=uav_pos)
    else:
        raise ValueError(
            f"task.positions: unknown distribution {dist.positions!r} (expected 'uniform', 'clustered' or 'mixed')"
        )
    uav_range = rng.uniform(dist.range_min, dist.range_max, size=(count, n_uav))
    need = rng.integers(dist.need_min, dist.need_max + 1, size=(count, n_target))
    value = need * rng.uniform(dist.value_min, dist.value_max, size=(count, n_target))
    return [Scene(uav_pos[s], uav_range[s], target_pos[s], need[s], value[s], float(dist.lam)) for s in range(count)]


MIXED_CHUNK = 16  # task=mixed: scenes per draw of the target ratio (one target count per drawn batch)


def _mixed_scenes(dist: SceneDistribution, n_uav: int, count: int, seed: int) -> list[Scene]:
    """``task=mixed`` comes from the torch generator (one definition of the distribution), in chunks so that
    the target ratio varies across a split."""
    generator = torch.Generator().manual_seed(seed)
    return [
        scene
        for start in range(0, count, MIXED_CHUNK)
        for scene in generate_scene_batch(
            dist, n_uav, min(MIXED_CHUNK, count - start), generator, torch.device("cpu")
        ).to_scenes()
    ]


def custom_generator(path: str) -> Callable[..., list[Scene]]:
    """The function a ``task.generator`` path names (``mypkg.scenes.draw``: importable, like a ``_target_``)."""
    found = import_named(path, "task.generator")
    if not callable(found):
        raise ConfigError(f"task.generator={path}: not a function of a module (give module.function)")
    return found


def distribution_key(dist: SceneDistribution) -> dict[str, Any]:
    """What names a distribution's scenes in a cache key: its fields, and a custom generator's path and source
    code (a changed generator is a new split). Without one, the fields as they were before the generator
    existed, so the caches built then still match."""
    key = asdict(dist)
    if dist.generator is None:
        key.pop("generator")
    else:
        key["generator_source"] = source_digest(custom_generator(dist.generator))
    return key


def _custom_scenes(dist: SceneDistribution, n_uav: int, count: int, seed: int) -> list[Scene]:
    """The scenes of ``dist.generator``, checked: ``count`` of them, each with ``n_uav`` UAVs."""
    scenes = list(custom_generator(dist.generator)(dist, n_uav, count, seed))
    wrong = next((i for i, s in enumerate(scenes) if not isinstance(s, Scene) or s.n_uav != n_uav), None)
    if len(scenes) != count or wrong is not None:
        what = (
            f"{len(scenes)} scenes for {count}"
            if len(scenes) != count
            else f"scene {wrong} is {type(scenes[wrong]).__name__}"
            + (f" of {scenes[wrong].n_uav} UAVs" if isinstance(scenes[wrong], Scene) else "")
        )
        raise ConfigError(
            f"task.generator={dist.generator}: returned {what}; it must return a list of {count} "
            f"Scene objects of {n_uav} UAVs (uavgnn.problem.scenes.Scene)"
        )
    return scenes
