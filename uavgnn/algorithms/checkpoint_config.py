"""A checkpoint's stored config on the schemas of this version, and a complete config without Hydra.

Keys added since a checkpoint was saved take their defaults (or, in ``ABSENT_MEANS``, what it ran with); keys
no longer in a schema (saved before each algorithm and model kind had its own) are dropped. A stored model is
of the kind whose schema names it by default (``mlp``, ``tcn``), else a TransformerGNN size.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from omegaconf import DictConfig, OmegaConf

from uavgnn.algorithms.registry import DEFAULTS, algorithm_class, algorithms, model_schemas
from uavgnn.config.schemas import Config

# keys added with a default other than what a checkpoint saved before them ran with: that value, when absent
ABSENT_MEANS = {"model.relaxation": False}  # a model that reads the relaxation changed its input size


def default_config(algorithm: str = DEFAULTS["algorithm"]) -> DictConfig:
    """A complete config without Hydra: every group's schema defaults, ``algorithm``'s keys and the small model
    (the composed ``conf/config.yaml`` where the YAML files only repeat the defaults)."""
    kind_name, size = DEFAULTS["model"]
    cfg = OmegaConf.structured(Config)
    cfg.algorithm = OmegaConf.structured(algorithm_class(algorithm).config)
    cfg.model = OmegaConf.structured(model_schemas()[kind_name](name=size))
    return cfg


def model_schema(name: str) -> type:
    """The schema of a stored ``model.name``: the kind whose schema names it by default (``mlp``, ``tcn``), else
    the default kind's (a TransformerGNN size: tiny, small...)."""
    schemas = model_schemas()
    named = {f.default: schema for schema in schemas.values() for f in dataclasses.fields(schema) if f.name == "name"}
    return named.get(name, schemas[DEFAULTS["model"][0]])


def stored_config(config: dict[str, Any]) -> DictConfig:
    """A checkpoint's stored config on the schemas of this version (see the module's docstring)."""
    name = (config.get("algorithm") or {}).get("name", DEFAULTS["algorithm"])
    cfg = default_config(name if name in algorithms() else DEFAULTS["algorithm"])
    size = (config.get("model") or {}).get("name", DEFAULTS["model"][1])
    cfg.model = OmegaConf.structured(model_schema(size)(name=size))
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
