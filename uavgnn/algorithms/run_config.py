"""A training run's config: the groups its algorithm never reads left out, so its record, its dashboard config
and its checkpoints say what it trained with."""

from __future__ import annotations

import copy

from omegaconf import DictConfig, open_dict

from uavgnn.algorithms.registry import algorithm_class
from uavgnn.config.modes import MODES
from uavgnn.infrastructure.console import say_once

SHARED_GROUPS = ("task", "env", "data", "curriculum", "eval")  # read by some algorithms' training runs only
MODE_GROUPS = tuple(mode.group for mode in MODES.values() if mode.group)  # read by their mode only


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
