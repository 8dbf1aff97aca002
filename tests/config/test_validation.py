"""Every value is checked before any work (``uavgnn.config.validation`` and each schema's ranges): every numeric key
of every schema has a range, the values just outside it (and NaN, infinities for floats) are refused naming the key
and the range, and the named combinations that cannot run are refused in one line."""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import re
import typing

import pytest
from conftest import compose
from omegaconf import ListConfig, OmegaConf

from uavgnn.algorithms.registry import algorithms, check_config, model_schemas
from uavgnn.config.schemas import Config
from uavgnn.config.validation import RANGES
from uavgnn.infrastructure.errors import ConfigError

HANDLED_ELSEWHERE = {"optim.checkpoint_layers", "curriculum.stages", "curriculum.replay"}  # own rules, own tests


def numeric_keys(schema: type = Config, prefix: str = "") -> dict[str, type]:
    """Every int/float key of the schema (list keys by their element type)."""
    found: dict[str, type] = {}
    for f in dataclasses.fields(schema):
        kind = typing.get_type_hints(schema)[f.name]
        inner = [a for a in typing.get_args(kind) if a is not type(None)]
        kind = inner[0] if typing.get_origin(kind) in (typing.Union, list) and len(inner) == 1 else kind
        if dataclasses.is_dataclass(kind):
            found.update(numeric_keys(kind, f"{prefix}{f.name}."))
        elif kind in (int, float):
            found[f"{prefix}{f.name}"] = kind
    return found


def every_numeric_key() -> dict[str, tuple[str, type, object]]:
    """Every numeric key of every schema -> (the algorithm that composes it, its type, its range): the shared
    groups' and the model kinds' (``RANGES``), each algorithm's own (declared in its schema)."""
    keys = {key: ("imitation", kind, RANGES.get(key)) for key, kind in numeric_keys().items()}
    for schema in model_schemas().values():
        keys.update({key: ("imitation", kind, RANGES.get(key)) for key, kind in numeric_keys(schema, "model.").items()})
    for name, algorithm in algorithms().items():
        ranges = {f"algorithm.{f.name}": f.metadata.get("range") for f in dataclasses.fields(algorithm.config)}
        keys.update(
            {key: (name, kind, ranges[key]) for key, kind in numeric_keys(algorithm.config, "algorithm.").items()}
        )
    return keys


def out_of_range(valid, kind: type) -> list:
    bad = []
    if math.isfinite(valid.low):
        bad.append(valid.low if valid.low_open else valid.low - 1)
    if math.isfinite(valid.high):
        bad.append(valid.high if valid.high_open else valid.high + 1)
    if kind is float:
        bad += [math.nan, math.inf, -math.inf]
    return [kind(v) if math.isfinite(v) else v for v in bad]


def test_every_numeric_key_has_a_valid_range() -> None:
    missing = [
        key for key, (_, _, valid) in every_numeric_key().items() if valid is None and key not in HANDLED_ELSEWHERE
    ]
    assert not missing and set(RANGES) <= set(every_numeric_key())


@functools.cache
def valid_config(algorithm: str):
    """The default config of ``algorithm``, composed and checked once per worker (composing takes 0.4 s; each
    key's test changes a deep copy)."""
    cfg = compose(f"algorithm={algorithm}")
    check_config(cfg)
    return cfg


@pytest.mark.parametrize("key", sorted(set(every_numeric_key()) - HANDLED_ELSEWHERE))
def test_values_outside_each_range_are_rejected_naming_the_key(key) -> None:
    algorithm, kind, valid = every_numeric_key()[key]
    base = valid_config(algorithm)
    is_list = isinstance(OmegaConf.select(base, key), ListConfig)
    for value in out_of_range(valid, kind):
        cfg = copy.deepcopy(base)
        OmegaConf.update(cfg, key, [value] if is_list else value)
        with pytest.raises(ConfigError) as err:
            check_config(cfg)
        assert str(err.value).startswith(f"{key}=") and str(valid) in str(err.value)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["task=file"], "task=file needs task.file=PATH"),
        (["train.lr=nan"], "train.lr=nan must be > 0"),
        (["train.grad_clip=-1"], "train.grad_clip=-1.0 must be > 0"),
        (["model.dropout=1.0"], "model.dropout=1.0 must be in [0, 1)"),
        (
            ["algorithm=imitation", "data.source=generated"],
            "data.source=generated with algorithm=imitation: fresh scenes have no MILP labels",
        ),
        (
            ["data.source=generated", "algorithm=reinforce", "algorithm.imitation_weight=0.5"],
            "data.source=generated with algorithm.imitation_weight=0.5",
        ),
        (
            ["data.source=generated", "algorithm=reinforce", "task=file", "task.file=x.json"],
            "data.source=generated with task=file",
        ),
        (["data.source=files"], "data.source='files' is not one of cache, generated"),
    ],
)
def test_named_bad_values_fail_before_any_work(overrides, message) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_config(compose(*overrides))
