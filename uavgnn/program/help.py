"""What ``uavgnn --help`` lists, asked of the lists that hold it when the help prints: the modes
(``uavgnn.config.modes``), the algorithms and those that make a kind of checkpoint (the registry), every
config group's options (the shipped YAML files and the options in Hydra's ConfigStore). ``conf/hydra/help``
names them as resolvers: ``${uavgnn.modes:}``, ``${uavgnn.algorithms:}``, ``${uavgnn.making:<product>}``,
``${uavgnn.groups:}``."""

from __future__ import annotations

from importlib import resources

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from uavgnn.algorithms import registry
from uavgnn.config import modes


def group_options() -> str:
    """Every config group a user picks from and its options, as ``uavgnn --help`` lists them: the shipped
    ``conf/`` files and the options stored in Hydra's ConfigStore (a plug-in's ``algorithm/<name>``); the schemas
    stored under ``*/schema`` and Hydra's own groups are not options."""
    conf = resources.files("uavgnn.conf")
    options: dict[str, set[str]] = {}
    for group in (d for d in conf.iterdir() if d.is_dir() and d.name not in ("hydra", "__pycache__")):
        options[group.name] = {p.name.removesuffix(".yaml") for p in group.iterdir() if p.name.endswith(".yaml")}
    for group, stored in ConfigStore.instance().repo.items():
        if isinstance(stored, dict) and group != "hydra":
            names = {name.removesuffix(".yaml") for name, node in stored.items() if not isinstance(node, dict)}
            options.setdefault(group, set()).update(names)
    return "\n".join(f"    {group + ':':<16}{', '.join(sorted(options[group]))}" for group in sorted(options))


def register_help() -> None:
    OmegaConf.register_new_resolver("uavgnn.modes", modes.listing, replace=True)
    OmegaConf.register_new_resolver("uavgnn.algorithms", registry.listing, replace=True)
    OmegaConf.register_new_resolver("uavgnn.making", lambda name: registry.making(registry.product(name)), replace=True)
    OmegaConf.register_new_resolver("uavgnn.groups", group_options, replace=True)
