"""The algorithm registry: every ``Algorithm`` subclass with a ``name`` in a module of this package, and those
that installed packages name in the entry-point group ``uavgnn.algorithms`` (plug-ins: a module or a class).

The loop, the modes, validation and ``mode=info`` ask the registry, never an algorithm by name. To add one,
write ``uavgnn/algorithms/<name>.py`` (a subclass of ``Algorithm`` with its config schema: ``base.py`` says
what it declares) and ``conf/algorithm/<name>.yaml``; nothing else (docs/adding-an-algorithm.md walks through it). An
algorithm outside the package needs no YAML: its schema is the ``algorithm/<name>`` option itself.
Importing the registry adds the algorithm and model schemas to ``register_configs`` (re-exported here).
"""

from __future__ import annotations

import copy
import importlib
import pkgutil
from collections.abc import Callable
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf, open_dict
from torch import nn

from uavgnn.algorithms.base import TAKERS, Algorithm
from uavgnn.configuration.schemas import GROUP_SCHEMAS, Config, register_configs
from uavgnn.configuration.validation import validate
from uavgnn.envs.uav_env import env_class
from uavgnn.infrastructure.console import say_once
from uavgnn.infrastructure.errors import CheckpointError, ConfigError
from uavgnn.models.agent_stack import MLPConfig
from uavgnn.models.tcn import TCNConfig
from uavgnn.models.transformer_gnn import TransformerGNNConfig
from uavgnn.runs.checkpoints import kind

__all__ = [
    "MODEL_SCHEMAS",
    "DEFAULTS",
    "algorithms",
    "algorithm_class",
    "make_algorithm",
    "make_model",
    "register_configs",
    "default_config",
    "stored_config",
    "describe",
    "produces",
    "require",
    "check_config",
    "which",
    "making",
    "listing",
]

MODEL_SCHEMAS = {"transformer_gnn": TransformerGNNConfig, "mlp": MLPConfig, "tcn": TCNConfig}
DEFAULTS = {"algorithm": "imitation", "model": ("transformer_gnn", "small")}  # conf/config.yaml's choices


PLUGINS = "uavgnn.algorithms"  # the entry-point group an installed package names its algorithms in


@cache
def algorithms() -> dict[str, type[Algorithm]]:
    """Every algorithm by name, this package's and the plug-ins' (each module imported once, on first use); a
    plug-in that does not load, or takes a name already taken, is a one-line ``ConfigError`` naming its entry
    point."""
    found = {
        a.name: a
        for module in pkgutil.iter_modules([str(Path(__file__).parent)])
        for a in _declared(importlib.import_module(f"{__name__}.{module.name}"))
    }
    for point in entry_points(group=PLUGINS):
        for algorithm in _plugin(point):
            if algorithm.name in found:
                raise ConfigError(
                    f"{_where(point)}: algorithm {algorithm.name!r} is already "
                    f"{found[algorithm.name].__module__}.{found[algorithm.name].__qualname__}"
                )
            found[algorithm.name] = algorithm
    return dict(sorted(found.items()))


def _declared(module: ModuleType) -> list[type[Algorithm]]:
    """The algorithms ``module`` defines (not those it imports)."""
    return [
        value
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, Algorithm)
        and "name" in vars(value)
        and value.__module__ == module.__name__
    ]


def _plugin(point: EntryPoint) -> list[type[Algorithm]]:
    """The algorithms an entry point names: a module's, or the one class."""
    try:
        loaded = point.load()
    except Exception as err:  # noqa: BLE001 - whatever a plug-in raises on import: one line naming it
        lines = str(err).strip().splitlines()
        raise ConfigError(
            f"{_where(point)}: cannot be loaded ({type(err).__name__}: {lines[0][:200] if lines else 'no message'})"
        ) from None
    if isinstance(loaded, ModuleType) and _declared(loaded):
        return _declared(loaded)
    if isinstance(loaded, type) and issubclass(loaded, Algorithm) and "name" in vars(loaded):
        return [loaded]
    raise ConfigError(
        f"{_where(point)}: names neither a subclass of uavgnn.algorithms.base.Algorithm with a name "
        "nor a module defining one"
    )


def _where(point: EntryPoint) -> str:
    """An entry point as a user finds it: the plug-in's distribution, its group and line."""
    package = f" of {point.dist.name}" if point.dist else ""
    return f"algorithm plug-in {point.name} = {point.value} (entry point{package}, group {PLUGINS})"


def algorithm_class(name: str) -> type[Algorithm]:
    if name not in algorithms():
        raise ConfigError(f"algorithm.name: unknown algorithm {name!r} (expected {', '.join(algorithms())})")
    return algorithms()[name]


def make_algorithm(cfg: Any, device: torch.device) -> Algorithm:
    """The configured ``algorithm`` with its settings."""
    return algorithm_class(cfg.algorithm.name)(cfg, device)


def make_model(cfg: Any) -> nn.Module:
    """The networks the configured ``algorithm`` trains, sized by the config."""
    return algorithm_class(cfg.algorithm.name).build_model(cfg)


def _store_group_schemas(store: ConfigStore) -> None:
    """Each algorithm's schema as ``algorithm/schema/<name>``, each model kind's as ``model/schema/<kind>``; a
    plug-in's schema is also its ``algorithm/<name>`` option (``algorithm=<name>`` composes it: its package
    adds no YAML to ``conf/``; budgets come from the command line, an experiment preset or its own YAML)."""
    for name, algorithm in algorithms().items():
        store.store(group="algorithm/schema", name=name, node=algorithm.config)
        if not algorithm.__module__.startswith(f"{__name__}."):
            store.store(group="algorithm", name=name, node=algorithm.config, provider=algorithm.__module__)
    for name, schema in MODEL_SCHEMAS.items():
        store.store(group="model/schema", name=name, node=schema)


GROUP_SCHEMAS.append(_store_group_schemas)  # config.register_configs() stores them with the root schema


def default_config(algorithm: str = DEFAULTS["algorithm"]) -> DictConfig:
    """A complete config without Hydra: every group's schema defaults, ``algorithm``'s keys and the small model
    (the composed ``conf/config.yaml`` where the YAML files only repeat the defaults)."""
    kind_name, size = DEFAULTS["model"]
    cfg = OmegaConf.structured(Config)
    cfg.algorithm = OmegaConf.structured(algorithm_class(algorithm).config)
    cfg.model = OmegaConf.structured(MODEL_SCHEMAS[kind_name](name=size))
    return cfg


# keys added with a default other than what a checkpoint saved before them ran with: that value, when absent
ABSENT_MEANS = {"model.relaxation": False}  # a model that reads the relaxation changed its input size (issue 61)


def stored_config(config: dict[str, Any]) -> DictConfig:
    """A checkpoint's stored config on the schemas of this version: keys added since take their defaults (or, in
    ``ABSENT_MEANS``, what the checkpoint ran with), keys no longer in a schema (saved before each algorithm and
    model kind had its own) are dropped."""
    name = (config.get("algorithm") or {}).get("name", DEFAULTS["algorithm"])
    cfg = default_config(name if name in algorithms() else DEFAULTS["algorithm"])
    size = (config.get("model") or {}).get("name", DEFAULTS["model"][1])
    cfg.model = OmegaConf.structured({"mlp": MLPConfig, "tcn": TCNConfig}.get(size, TransformerGNNConfig)(name=size))
    cfg = OmegaConf.merge(cfg, _known(cfg, config))
    for key, value in ABSENT_MEANS.items():
        group, field = key.split(".")
        if field in cfg[group] and field not in (config.get(group) or {}):
            cfg[group][field] = value
    return cfg


def _known(schema: Any, stored: Any) -> Any:
    """The part of ``stored`` whose keys the config ``schema`` has (recursively)."""
    if not isinstance(stored, dict) or not isinstance(schema, DictConfig):
        return stored
    return {key: _known(schema[key], value) for key, value in stored.items() if key in schema}


def produces(config: dict[str, Any] | None) -> str | None:
    """What a checkpoint with this stored config is (a key of ``TAKERS``), None for an unknown algorithm."""
    name = ((config or {}).get("algorithm") or {}).get("name", DEFAULTS["algorithm"])
    return algorithms()[name].produces if name in algorithms() else None


def describe(config: dict[str, Any] | None) -> str:
    """A checkpoint's kind and what takes it, from its stored config: for the errors that refuse it."""
    product = produces(config)
    return f"{kind(config)}: " + (f"{_a(product)}; {TAKERS[product]}" if product else "an unknown algorithm")


def _a(product: str) -> str:
    """``product`` with its article: an assignment policy, a dynamics model."""
    return ("an " if product[0] in "aeiou" else "a ") + product


def require(ckpt: dict[str, Any], path: str | Path, product: str, taker: str) -> type[Algorithm]:
    """The algorithm of a checkpoint ``taker`` (``mode=eval ckpt``, ...) reads, if it produces ``product``;
    else a one-line ``CheckpointError`` naming the checkpoint's kind and what takes it."""
    name = (ckpt["config"].get("algorithm") or {}).get("name", DEFAULTS["algorithm"])
    if name not in algorithms() or algorithms()[name].produces != product:
        raise CheckpointError(
            f"checkpoint {path} ({describe(ckpt['config'])}): {taker}= takes {_a(product)} ({making(product)})"
        )
    return algorithms()[name]


SHARED_GROUPS = ("task", "env", "data", "curriculum", "eval")  # read by some algorithms' training runs only
MODE_GROUPS = ("solve", "profile", "benchmark", "compare")  # read by their mode only


def training_config(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """A training run's config without the groups it never reads: the shared groups its algorithm does not
    declare (``Algorithm.reads``) and the other modes' groups. Its record, its dashboard config and its
    checkpoints then say what it trained with; a command-line ``overrides`` entry in a shared group left out is
    said in one warning (it changes nothing: a sweep over it repeats the same run)."""
    algorithm = algorithm_class(cfg.algorithm.name)
    unread = [group for group in SHARED_GROUPS if group not in algorithm.reads]
    for override in overrides:
        group = override.lstrip("+~").split("=")[0].split(".")[0]
        if group in unread:
            say_once(
                f"{override}: algorithm={algorithm.name} does not read the {group} group (its training reads "
                f"{', '.join(algorithm.reads)}): left out"
            )
    kept = copy.deepcopy(cfg)  # the schema's types stay (a resolved interpolation is still checked)
    with open_dict(kept):
        for group in (*unread, *MODE_GROUPS):
            del kept[group]
    return kept


def which(test: Callable[[type[Algorithm]], bool]) -> str:
    """The registered algorithms that pass ``test``, as a message names them: ``algorithm=coma, mappo or masac``
    (so no message keeps a list of names)."""
    names = [name for name, algorithm in algorithms().items() if test(algorithm)]
    return "algorithm=" + (names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}")


def making(product: str) -> str:
    """The algorithms whose checkpoints are ``product`` (a key of ``TAKERS``), as ``which`` names them."""
    return which(lambda algorithm: algorithm.produces == product)


def listing() -> str:
    """The algorithms as ``uavgnn --help`` lists them, one line each: the name and what it is
    (``Algorithm.summary``), the default marked."""
    width, default = max(map(len, algorithms())), DEFAULTS["algorithm"]
    return "\n".join(
        f"  {name:<{width}}  {algorithm.summary()}{'; the default' if name == default else ''}"
        for name, algorithm in algorithms().items()
    )


# conf/hydra/help/uavgnn.yaml asks these when `uavgnn --help` prints: ${uavgnn.algorithms:}, ${uavgnn.making:...}
OmegaConf.register_new_resolver("uavgnn.algorithms", listing, replace=True)
OmegaConf.register_new_resolver("uavgnn.making", making, replace=True)


def check_config(cfg: Any) -> None:
    """Every check before any work: the shared groups' (``validation.validate``) and the algorithm's own."""
    validate(cfg)
    algorithm = algorithm_class(cfg.algorithm.name)
    if cfg.curriculum.name != "none" and not algorithm.stages:
        raise ConfigError(f"algorithm={algorithm.name} trains on one scene size: use curriculum=none")
    if cfg.env.get("target"):
        if algorithm.scene_splits:
            raise ConfigError(
                f"env.target with algorithm={algorithm.name}: it trains on scenes, not in the "
                f"environment; your environment trains {which(lambda a: not a.scene_splits)}"
            )
        env_class(cfg.env.target)  # your environment class imports and is a UAVEnv: before any work
    if cfg.task.get("folder") and not algorithm.scene_splits:
        raise ConfigError(
            f"task=folder with algorithm={algorithm.name}: its scenes come from the environment, "
            f"which draws its own; your scene files train {which(lambda a: a.scene_splits)}"
        )
    algorithm.check(cfg)
