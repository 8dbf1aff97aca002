"""Which run to continue, and whether the new config may continue it.

``resume=auto|true`` continues the run directory's ``last.pt``. Exact
resumption needs the same model, data, seed, optimiser and loop settings,
so a changed key is refused, naming each one, unless it is in ``SAFE``:
settings that change how long the run goes, how often it reports, or how
fast it loads data, never what it computes. The safe changes are applied,
warned about and recorded in ``metrics.jsonl`` (a ``resume`` event).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from uavgnn.config import flatten
from uavgnn.errors import ConfigError, RunDirectoryError
from uavgnn.training.checkpoint import BEST, LAST, find_resume_checkpoint

log = logging.getLogger(__name__)

# keys (or whole groups, ending in '.') a resumed run may change
SAFE = ("train.steps", "train.eval_every", "train.ckpt_every", "train.log_every", "train.max_bad_steps",
        "train.max_rollbacks", "logger.", "hardware.num_workers", "hardware.pin_memory", "hardware.prefetch_factor",
        "hardware.persistent_workers", "hardware.threads", "hardware.sweep_jobs", "hardware.memory_fraction",
        "hardware.memory_limit_mb", "data.label_workers", "data.cache_dir", "optim.prefetch", "optim.graph_cache",
        "eval.", "solve.", "profile.", "benchmark.", "algorithm.init_from", "resume", "mode", "ckpt", "path", "action",
        "solver")
RUN_FILES = ("metrics.jsonl", LAST, BEST, "summary.json")


def resume_checkpoint(resume: str, out_dir: Path, refuse_existing_run: bool = True) -> Path | None:
    """``resume=auto``: this run directory's ``last.pt`` if any; ``true``: it must exist; ``false``: none.
    A fresh run refuses a directory that already holds a run's files (it would mix two histories)."""
    mode = str(resume).lower()
    if mode not in ("false", "none", "no", "true", "auto", "yes"):
        raise ConfigError(f"resume: expected false, true or auto, got {resume!r}")
    found = find_resume_checkpoint(out_dir) if mode in ("true", "auto", "yes") else None
    if found is None and mode in ("true", "yes"):
        raise ConfigError(f"resume=true but {out_dir} has no {LAST}; pass hydra.run.dir=<the run to resume>")
    held = [name for name in RUN_FILES if (out_dir / name).exists()]
    if refuse_existing_run and found is None and held and mode in ("false", "none", "no"):
        raise RunDirectoryError(f"{out_dir} already holds a run ({', '.join(held)}): continue it with resume=auto, "
                                "or start a new run in another directory (hydra.run.dir=...)")
    return found


def _is_safe(key: str) -> bool:
    return any(key == s or (s.endswith(".") and key.startswith(s)) for s in SAFE)


def config_changes(stored: dict[str, Any], new: dict[str, Any]) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """(unsafe, safe) changes between a checkpoint's config and the new one: ``{key: (stored, new)}``."""
    old, now = flatten(stored), flatten(new)
    missing = "<absent>"
    changed = {key: (old.get(key, missing), now.get(key, missing)) for key in sorted(set(old) | set(now))
               if old.get(key, missing) != now.get(key, missing)}
    unsafe = {key: change for key, change in changed.items() if not _is_safe(key)}
    return unsafe, {key: change for key, change in changed.items() if key not in unsafe}


def check_resume_config(path: Path, stored: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple]:
    """Refuse changes that break exact resumption, naming each key; return the safe ones (warned)."""
    unsafe, safe = config_changes(stored, new)
    if unsafe:
        listed = "; ".join(f"{key}: {old} -> {now}" for key, (old, now) in unsafe.items())
        raise ConfigError(f"resume from {path}: these settings differ from the run's and would break exact "
                          f"resumption: {listed}. Resume with the original values, or start a new run from its "
                          f"weights with algorithm.init_from={path}")
    if safe:
        log.warning("resume: applying changed settings %s",
                    ", ".join(f"{key}={now} (was {old})" for key, (old, now) in safe.items()))
    return safe
