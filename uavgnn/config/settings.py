"""The typed settings handed below the plug-ins, each read from its part of the config once.

``data/``, ``envs/``, ``dynamics/``, ``models/``, ``problem/``, ``solvers/`` and ``scoring/`` never receive the
Hydra config (import-linter forbids them ``omegaconf``; ``tests/test_settings_boundary.py`` watches every call
of a training run of each algorithm): the algorithms, the loop and the modes build these settings from the
shared groups here (an algorithm's own keys in its own file) and hand them down.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

import torch
from omegaconf import Container, OmegaConf

from uavgnn.data.batches import BatchSettings
from uavgnn.data.cache import BuildSettings
from uavgnn.data.fresh_scenes import FreshSettings
from uavgnn.data.splits import SPLITS, SplitSettings
from uavgnn.data.stages import StageMix
from uavgnn.envs.settings import EnvSettings
from uavgnn.evaluation.methods import Controls
from uavgnn.evaluation.test_sets import TestSetSettings
from uavgnn.infrastructure.device import Loading
from uavgnn.models.transformer_gnn import SAVED_BEFORE, TransformerGNNConfig
from uavgnn.problem.graphs import GraphSettings
from uavgnn.problem.scenes import SceneDistribution

T = TypeVar("T")


def typed(cls: type[T], node: Any, absent: Mapping[str, Any] | None = None) -> T:
    """The dataclass ``cls`` from a config node (a group, a checkpoint's stored dict, any object with these
    attributes), every value plain Python; a field the node lacks (saved before it existed) takes ``absent``'s
    value, else its default."""
    values = {}
    for f in fields(cls):
        found = f.name in node if isinstance(node, Mapping) else hasattr(node, f.name)
        if found:
            value = node[f.name] if isinstance(node, Mapping) else getattr(node, f.name)
            values[f.name] = OmegaConf.to_container(value, resolve=True) if isinstance(value, Container) else value
        elif absent and f.name in absent:
            values[f.name] = absent[f.name]
    return cls(**values)  # the other fields take their defaults


def scene_distribution(cfg: Any) -> SceneDistribution:
    """The ``task`` group's scene generator."""
    return typed(SceneDistribution, cfg.task)


def env_settings(cfg: Any) -> EnvSettings:
    """The ``env`` group: the multi-step UAV environment."""
    return typed(EnvSettings, cfg.env)


def graph_settings(cfg: Any) -> GraphSettings:
    """The ``data`` group's graph keys: the adaptive k and the UAV neighbours."""
    return typed(GraphSettings, cfg.data)


def loading(cfg: Any) -> Loading:
    """The ``hardware`` preset's loader keys and ``optim.prefetch``."""
    return typed(Loading, {**OmegaConf.to_container(cfg.hardware, resolve=True), "prefetch": bool(cfg.optim.prefetch)})


def split_settings(cfg: Any) -> SplitSettings:
    """The labelled splits of the ``data`` group and the ``task``'s scenes (or ``task=folder``'s files)."""
    data = cfg.data
    return SplitSettings(
        scene_distribution(cfg),
        typed(BuildSettings, data),
        int(data.n_uav),
        {s: int(getattr(data, f"{s}_scenes")) for s in SPLITS},
        {s: int(getattr(data, f"{s}_seed")) for s in SPLITS},
        str(data.cache_dir),
        int(data.label_workers),
        bool(cfg.optim.graph_cache),
        getattr(cfg.task, "folder", None),
    )


def batch_settings(cfg: Any) -> BatchSettings:
    """What the batches of the labelled splits depend on besides the splits."""
    return BatchSettings(
        int(cfg.seed), scene_distribution(cfg), int(cfg.data.k_max), int(cfg.optim.dense_max_nodes), loading(cfg)
    )


def fresh_settings(cfg: Any) -> FreshSettings:
    """What the scenes generated every step are made of (``data.source=generated``)."""
    data = cfg.data
    return FreshSettings(
        scene_distribution(cfg),
        int(cfg.seed),
        int(data.k_max),
        int(data.uav_neighbours),
        bool(getattr(cfg.model, "relaxation", False)),
        int(data.n_uav),
        tuple(data.fresh_sizes),
        int(cfg.hardware.max_batch_size),
    )


def stage_mix(cfg: Any) -> StageMix | None:
    """How a curriculum stage's batch is made; None without a curriculum."""
    return None if cfg.curriculum.name == "none" else typed(StageMix, cfg.curriculum)


def controls(cfg: Any, best_of: bool = True) -> Controls:
    """The ``eval`` group's no-model controls; ``best_of=False`` leaves the sampled row out (the training run's
    table)."""
    ev = cfg.eval
    return Controls(
        tuple(ev.keeps),
        tuple(ev.pruners),
        tuple(ev.milp_budgets),
        float(ev.milp_time_limit),
        int(ev.best_of) if best_of else 0,
    )


def test_set_settings(cfg: Any, dtype: torch.dtype | None) -> TestSetSettings:
    """How ``mode=eval`` scores an assignment policy's test sets (``dtype``: the forward's autocast dtype)."""
    ev = cfg.eval
    return TestSetSettings(
        split_settings(cfg),
        int(cfg.data.test_scenes),
        int(ev.max_total_uavs),
        float(ev.milp_time_limit),
        int(cfg.data.label_workers),
        str(ev.decoder),
        int(ev.samples),
        bool(ev.repair),
        controls(cfg),
        dtype,
    )


def transformer(model: Any) -> TransformerGNNConfig:
    """A ``model`` group (or a checkpoint's stored one) of a TransformerGNN; a key saved before it existed takes
    the value the checkpoint ran with (``SAVED_BEFORE``)."""
    return typed(TransformerGNNConfig, model, SAVED_BEFORE)
