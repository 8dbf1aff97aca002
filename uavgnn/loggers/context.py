"""How a run shows on a dashboard: its display name, group (its sweep), tags and job type (its mode), from the
running Hydra job."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from uavgnn.runs.directory import swept_keys
from uavgnn.runs.identity import is_incidental


@dataclass(frozen=True)
class RunContext:
    """How a run shows on the dashboard: display name, group (its sweep), tags and job type (its mode)."""

    name: str | None = None
    group: str | None = None
    tags: tuple[str, ...] = ()
    job_type: str | None = None
    overrides: tuple[str, ...] = ()  # the command line's overrides that define the run (``key=value``)


def path_label(directory: Path) -> str:
    """A wandb-safe label of a directory (``multirun/2026-11-22/12-00-00`` -> ``2026-11-22_12-00-00``):
    a sweep's group."""
    parts = [p for p in directory.resolve().parts[1:][-3:] if p not in ("outputs", "multirun")]
    return re.sub(r"[^A-Za-z0-9_.-]", "-", "_".join(parts))[-120:]


def run_context(job_type: str | None = None) -> RunContext:
    """wandb display name (a sweep job's swept overrides, ``model=tiny,seed=0``), group (the sweep
    directory), tags: the chosen config-group options (``model:small``) plus the other short overrides
    (``optim.amp=true``; ``model=small`` would repeat ``model:small``), and the overrides that define the run
    (TensorBoard's hyperparameters)."""
    if not HydraConfig.initialized():
        return RunContext(job_type=job_type)
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    group = path_label(Path(hc.sweep.dir)) if multirun else None
    overrides = [str(o) for o in hc.overrides.task if "/" not in str(o)]  # paths make poor names
    swept = swept_keys(Path(hc.sweep.dir)) if multirun else set()
    name = None
    if multirun:
        name = ",".join(o for o in overrides if o.split("=")[0] in swept) or ",".join(overrides) or None
    choices = {g: o for g, o in hc.runtime.choices.items() if not g.startswith("hydra") and o and g != "uavgnn_schema"}
    tags = [f"{g}:{o}" for g, o in choices.items()]
    tags += [o for o in overrides if len(o) <= 64 and o.split("=")[0].lstrip("+~") not in choices]
    keys = {o: o.split("=")[0].lstrip("+~") for o in map(str, hc.overrides.task)}
    # incidental: a key that does not define a run, or a group whose keys all do not (logger=jsonl)
    defining = tuple(o for o, k in keys.items() if not (is_incidental(k) or is_incidental(f"{k}.")))
    return RunContext(name, group, tuple(sorted(set(tags))), job_type, defining)
