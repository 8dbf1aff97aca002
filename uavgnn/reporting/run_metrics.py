"""What ``mode=compare`` shows of its runs: what each run's algorithm declares (``Algorithm.compared``), found by
the name in the run's recorded config; runs of several algorithms: each one's figures and curves, side by side."""

from __future__ import annotations

import json

from uavgnn.runs.identity import is_incidental
from uavgnn.runs.record import Run


def differing_keys(runs: list[Run]) -> list[str]:
    """Config keys that define a run whose values are not the same in every run (``uavgnn.runs.identity``)."""
    keys = sorted({k for r in runs for k in r.config if not is_incidental(k)})
    return [k for k in keys if len({json.dumps(r.config.get(k), default=str) for r in runs}) > 1]


def label_parts(runs: list[Run], keys: list[str]) -> list[list[tuple[str, str]]]:
    """What each run's seed group shares, as the user chose it, as (key, value) pairs: the command-line overrides
    that differ between runs, seed aside (``model=tiny``, ``optim.amp=true``); runs without their overrides (or
    whose overrides do not tell them apart): every differing config key but the seed (``model.name=tiny``)."""
    by_key = [dict(o.split("=", 1) for o in r.overrides if "=" in o) for r in runs]
    varied = sorted({k for o in by_key for k in o if k != "seed" and len({d.get(k) for d in by_key}) > 1})
    from_config = [[(k, str(r.config.get(k))) for k in keys if k != "seed"] for r in runs]
    from_overrides = [[(k, o[k]) for k in varied if k in o] for o in by_key]
    as_text = [
        [", ".join(f"{k}={v}" for k, v in parts) for parts in labels] for labels in (from_config, from_overrides)
    ]
    distinct = len(set(zip(*as_text))) == len(set(as_text[1]))
    return from_overrides if all(r.overrides for r in runs) and distinct else from_config


def group_labels(runs: list[Run], keys: list[str]) -> list[str]:
    """``label_parts`` as text: ``model=tiny, optim.amp=true`` (runs that differ by seed alone: empty)."""
    return [", ".join(f"{k}={v}" for k, v in parts) for parts in label_parts(runs, keys)]
