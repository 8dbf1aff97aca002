"""The algorithm registry: every ``Algorithm`` subclass with a ``name`` in a module of this package, and those that
installed packages name in the entry-point group ``uavgnn.algorithms`` (plug-ins: a module or a class).

The loop, the modes, validation and ``mode=info`` ask the registry, never an algorithm by name: which algorithms
there are, the one a config or a checkpoint names, what its checkpoints are and what takes them, the model kinds
their networks can be, and whether a config is one it can train (its declared ``capabilities``, then its own
``check``). Imported, it adds each algorithm's and each model kind's schema to ``uavgnn.config.register_configs``.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from collections.abc import Callable
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf
from torch import nn

from uavgnn.algorithms.base import Algorithm, Product
from uavgnn.config.schemas import GROUP_SCHEMAS
from uavgnn.config.validation import validate
from uavgnn.envs.uav_env import env_class
from uavgnn.infrastructure.errors import CheckpointError, ConfigError
from uavgnn.infrastructure.memory import check_fits
from uavgnn.runs.checkpoints import kind

log = logging.getLogger(__name__)
PACKAGE = "uavgnn.algorithms"  # this package: its modules' algorithms are found without an entry point
PLUGINS = "uavgnn.algorithms"  # the entry-point group an installed package names its algorithms in
DEFAULTS = {"algorithm": "imitation", "model": ("transformer_gnn", "small")}  # conf/config.yaml's choices


_broken: dict[str, str] = {}  # filled by algorithms()


@cache
def algorithms() -> dict[str, type[Algorithm]]:
    """Every algorithm by name, this package's and the plug-ins' that load (each module imported once, on first
    use). A plug-in that does not load, or takes a name already taken, is left out (``broken_plugins``)."""
    found = {
        a.name: a
        for module in pkgutil.iter_modules([str(Path(__file__).parent)])
        for a in _declared(importlib.import_module(f"{PACKAGE}.{module.name}"))
    }
    _broken.clear()
    for point in entry_points(group=PLUGINS):
        try:
            loaded = _plugin(point)
        except ConfigError as err:
            _broken[point.name] = str(err)
            continue
        for algorithm in loaded:
            if algorithm.name in found:
                _broken[point.name] = (
                    f"{_where(point)}: algorithm {algorithm.name!r} is already "
                    f"{found[algorithm.name].__module__}.{found[algorithm.name].__qualname__}"
                )
            else:
                found[algorithm.name] = algorithm
    for message in _broken.values():  # once a process: an installed plug-in that does not work is no secret
        log.warning("%s; the other algorithms work", message)
    return dict(sorted(found.items()))


def broken_plugins() -> dict[str, str]:
    """The plug-ins left out of ``algorithms``, by entry point name: the one line that says why, raised when one
    is chosen (``algorithm_class``, ``algorithm=<name>``); the others, built-ins included, work meanwhile."""
    algorithms()
    return dict(_broken)


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
    if name in broken_plugins() and name not in algorithms():
        raise ConfigError(broken_plugins()[name])
    if name not in algorithms():
        broken = f"; plug-ins that do not load: {', '.join(broken_plugins())}" if broken_plugins() else ""
        raise ConfigError(f"algorithm.name: unknown algorithm {name!r} (expected {', '.join(algorithms())}{broken})")
    return algorithms()[name]


def make_algorithm(cfg: Any, device: torch.device) -> Algorithm:
    """The configured ``algorithm`` with its settings, once its networks are known to fit in memory."""
    algorithm = algorithm_class(cfg.algorithm.name)
    check_networks_fit(algorithm, cfg, device)
    return algorithm(cfg, device)


NETWORK_COPIES = 5  # bytes of a parameter x: its weights, gradient, the optimiser's two moments, a target copy
EXACT_UP_TO = 64  # UAVs up to which the networks are counted as built; beyond, from a quadratic through 16, 32, 64


def network_parameters(algorithm: type[Algorithm], cfg: Any) -> int | None:
    """The parameters of ``algorithm``'s networks for ``cfg``, counted on the meta device (nothing allocated):
    as built up to ``EXACT_UP_TO`` UAVs (``env.n_uav``); beyond, from the quadratic through 16, 32 and 64 UAVs
    (per-agent networks whose inputs grow with the swarm grow as its square, a graph actor not at all), as
    building thousands of per-agent networks takes minutes even on the meta device. None where a network
    cannot be built there."""
    n_uav = OmegaConf.select(cfg, "env.n_uav", default=None)

    def count(n: int | None) -> int:
        sized = cfg if n is None else OmegaConf.merge(cfg, {"env": {"n_uav": n}})
        with torch.device("meta"):
            model = algorithm.build_model(sized)
        return sum(p.numel() for p in model.parameters()) if isinstance(model, nn.Module) else 0

    try:
        if n_uav is None or n_uav <= EXACT_UP_TO:
            return count(n_uav)
        sizes = [16, 32, 64]
        return int(np.polyval(np.polyfit(sizes, [count(n) for n in sizes], 2), n_uav))
    except Exception:  # noqa: BLE001 - a plug-in's network the meta device cannot build: not estimated here
        return None


def check_networks_fit(algorithm: type[Algorithm], cfg: Any, device: torch.device) -> None:
    """A run whose networks cannot fit is refused before any is built, naming their size and the knob."""
    params = network_parameters(algorithm, cfg)
    if not params:
        return
    n_uav = OmegaConf.select(cfg, "env.n_uav", default=None)
    sized = f" with env.n_uav={n_uav}" if n_uav is not None else ""
    knob = (
        "lower env.n_uav (per-agent networks grow with the swarm; a graph actor, model=small, does not) or model.hidden"
        if n_uav is not None
        else "lower model.hidden or model.layers"
    )
    check_fits(
        f"algorithm={algorithm.name}{sized}: its networks ({params:,} parameters, with their gradients and "
        "optimiser state)",
        params * 4 * NETWORK_COPIES,
        knob,
        device,
    )


def make_model(cfg: Any) -> nn.Module:
    """The networks the configured ``algorithm`` trains, sized by the config."""
    return algorithm_class(cfg.algorithm.name).build_model(cfg)


def model_schemas() -> dict[str, type]:
    """Every model kind the algorithms declare (``Capabilities.models``): kind -> its schema, the default kind
    first."""
    kinds = {kind: schema for a in algorithms().values() for kind, schema in (a.capabilities.models or {}).items()}
    default = DEFAULTS["model"][0]
    return {default: kinds[default], **kinds} if default in kinds else kinds


def _store_group_schemas(store: ConfigStore) -> None:
    """Each algorithm's schema as ``algorithm/schema/<name>``, each model kind's as ``model/schema/<kind>``; a
    plug-in's schema is also its ``algorithm/<name>`` option (``algorithm=<name>`` composes it: its package adds no
    YAML to ``conf/``; budgets come from the command line, an experiment preset or its own YAML)."""
    for name, algorithm in algorithms().items():
        store.store(group="algorithm/schema", name=name, node=algorithm.config)
        if not algorithm.__module__.startswith(f"{PACKAGE}."):
            store.store(group="algorithm", name=name, node=algorithm.config, provider=algorithm.__module__)
    for name, schema in model_schemas().items():
        store.store(group="model/schema", name=name, node=schema)


GROUP_SCHEMAS.append(_store_group_schemas)  # uavgnn.config.register_configs stores them with the root schema


def produces(config: dict[str, Any] | None) -> Product | None:
    """What a checkpoint with this stored config is, None for an unknown algorithm."""
    name = ((config or {}).get("algorithm") or {}).get("name", DEFAULTS["algorithm"])
    return algorithms()[name].produces if name in algorithms() else None


def describe(config: dict[str, Any] | None) -> str:
    """A checkpoint's kind and what takes it, from its stored config: for the errors that refuse it."""
    product = produces(config)
    return f"{kind(config)}: " + (f"{product.with_article}; {product.takers}" if product else "an unknown algorithm")


def require(ckpt: dict[str, Any], path: str | Path, product: Product, taker: str) -> type[Algorithm]:
    """The algorithm of a checkpoint ``taker`` (``mode=eval ckpt``, ...) reads, if it produces ``product``;
    else a one-line ``CheckpointError`` naming the checkpoint's kind and what takes it."""
    name = (ckpt["config"].get("algorithm") or {}).get("name", DEFAULTS["algorithm"])
    if name not in algorithms() or algorithms()[name].produces != product:
        raise CheckpointError(
            f"checkpoint {path} ({describe(ckpt['config'])}): {taker}= takes {product.with_article} ({making(product)})"
        )
    return algorithms()[name]


def which(test: Callable[[type[Algorithm]], bool]) -> str:
    """The registered algorithms that pass ``test``, as a message names them: ``algorithm=coma, mappo or masac``
    (so no message keeps a list of names)."""
    names = [name for name, algorithm in algorithms().items() if test(algorithm)]
    return "algorithm=" + (names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}")


def product(name: str) -> Product:
    """The kind of checkpoint named ``name`` (``dynamics model``) among those the algorithms make."""
    made = {algorithm.produces.name: algorithm.produces for algorithm in algorithms().values()}
    if name not in made:
        raise ConfigError(f"no algorithm makes a {name!r} (they make {', '.join(made)})")
    return made[name]


def making(product: Product) -> str:
    """The algorithms whose checkpoints are ``product``, as ``which`` names them."""
    return which(lambda algorithm: algorithm.produces == product)


def listing() -> str:
    """The algorithms as ``uavgnn --help`` lists them: the name and what it is (``Algorithm.summary``, the default
    marked), and below, what it can train (``Capabilities.describe``)."""
    width, default = max(map(len, algorithms())), DEFAULTS["algorithm"]
    return "\n".join(
        f"  {name:<{width}}  {algorithm.summary()}{'; the default' if name == default else ''}\n"
        f"  {'':<{width}}    ({algorithm.capabilities.describe()})"
        for name, algorithm in algorithms().items()
    )


def check_config(cfg: Any) -> None:
    """Every check before any work: the shared groups' values (``validation.validate``), the algorithm's declared
    capabilities, then its own rules (``Algorithm.check``)."""
    validate(cfg)
    algorithm = algorithm_class(cfg.algorithm.name)
    check_capabilities(algorithm, cfg)
    algorithm.check(cfg)


def check_capabilities(algorithm: type[Algorithm], cfg: Any) -> None:
    """The config asks only what ``algorithm`` declares it can do (``Capabilities``), or a ``ConfigError`` naming
    the key and, where another algorithm can, which."""
    can, name = algorithm.capabilities, algorithm.name
    if can.models is not None and OmegaConf.get_type(cfg.model) not in can.models.values():
        raise ConfigError(
            f"model={cfg.model.name} with algorithm={name}: its networks are "
            + " or ".join(_model_choice(kind, schema) for kind, schema in can.models.items())
        )
    if can.actions and cfg.env.action not in can.actions:
        others = [a for a in algorithms().values() if cfg.env.action in a.capabilities.actions]
        trained_by = f"; {cfg.env.action} actions train {which(lambda a: a in others)}" if others else ""
        raise ConfigError(
            f"env.action={cfg.env.action} with algorithm={name}: it acts with "
            f"{' or '.join(can.actions)} actions (env.action={'|'.join(can.actions)}){trained_by}"
        )
    if not can.auto_batch_size and cfg.hardware.batch_size == "auto":
        unit = "episodes per minibatch" if can.on_policy else "its own unit"
        raise ConfigError(f"algorithm={name}: hardware.batch_size is {unit}; give a number, not auto")
    if cfg.curriculum.name != "none" and not can.stages:
        raise ConfigError(f"algorithm={name} trains on one scene size: use curriculum=none")
    if cfg.env.get("target"):
        if can.scene_splits:
            raise ConfigError(
                f"env.target with algorithm={name}: it trains on scenes, not in the environment; your environment "
                f"trains {which(lambda a: not a.capabilities.scene_splits)}"
            )
        env_class(cfg.env.target)  # your environment class imports and is a UAVEnv: before any work
    if cfg.task.get("folder") and not can.scene_splits:
        raise ConfigError(
            f"task=folder with algorithm={name}: its scenes come from the environment, which draws its own; your "
            f"scene files train {which(lambda a: a.capabilities.scene_splits)}"
        )


def _model_choice(kind: str, schema: type) -> str:
    """How a user picks a model kind: ``model=mlp``; a kind of several sizes as ``a <Kind> size (model=...)``."""
    options = getattr(schema, "options", None)
    return (
        f"a {schema.__name__.removesuffix('Config')} size (model={'|'.join(options)})" if options else f"model={kind}"
    )
