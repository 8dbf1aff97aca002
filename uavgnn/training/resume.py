"""Which run to continue, whether the new config may continue it, and whether it is already done.

``resume=auto|true`` continues the run directory's ``last.pt``. Exact
resumption needs the same model, data, seed, optimiser and loop settings,
so a changed key is refused, naming each one, unless it does not define the run
(``uavgnn.runs.identity``) or is in ``RESUME_SAFE``: how long the run goes, how
often it reports, what the other modes read. The safe changes are applied,
warned about and recorded in ``metrics.jsonl`` (a ``resume`` event).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from uavgnn.algorithms.base import Algorithm
from uavgnn.algorithms.checkpoint_config import stored_config
from uavgnn.infrastructure.errors import ConfigError, RunDirectoryError
from uavgnn.infrastructure.nested import flatten
from uavgnn.runs.checkpoints import find_resume_checkpoint
from uavgnn.runs.directory import held_run_files, leftovers
from uavgnn.runs.history import read_history
from uavgnn.runs.identity import is_incidental
from uavgnn.runs.layout import ATTEMPT_FILES, HISTORY, HYDRA_CONFIG, HYDRA_RECORD, LAST, SUMMARY
from uavgnn.runs.record import read_object

log = logging.getLogger(__name__)

# keys a resumed run may change besides those that do not define it: how long it runs and reports, what the other
# modes read, how the policy decides
RESUME_SAFE = (
    "train.steps",
    "train.eval_every",
    "train.ckpt_every",
    "train.log_every",
    "train.max_bad_steps",
    "train.max_rollbacks",
    "eval.",
    "solve.",
    "profile.",
    "benchmark.",
    "mode",
    "action",
    "solver",
    # how the policy decides, not what trains:
    "model.capacity_iters",
    "model.capacity_fill",
    "model.commit_stages",
)
# how scene graphs are built: what an algorithm that trains on no scene split (``scene_splits`` false) never reads
GRAPH_KEYS = ("data.k_min", "data.k_divisor", "data.k_max", "data.k_jitter", "data.uav_neighbours")


def resume_checkpoint(
    resume: str,
    out_dir: Path,
    refuse_existing_run: bool = True,
    config: dict[str, Any] | None = None,
    algorithm: type[Algorithm] = Algorithm,
) -> Path | None:
    """``resume=auto``: this run directory's ``last.pt`` if any; ``true``: it must exist; ``false``: none.
    A fresh start refuses a directory holding anything it could overwrite: another run (continue it with
    ``resume=auto``), a run without ``last.pt`` (its history and results would be lost), or other files;
    except, with ``resume=auto``, an attempt of this same run (``config``) that stopped before its first
    checkpoint: nothing trained to lose, so it starts again (keeping its wandb run id)."""
    mode = str(resume).lower()
    if mode not in ("false", "none", "no", "true", "auto", "yes"):
        raise ConfigError(f"resume: expected false, true or auto, got {resume!r}")
    found = find_resume_checkpoint(out_dir) if mode in ("true", "auto", "yes") else None
    if found is None and mode in ("true", "yes"):
        raise ConfigError(f"resume=true but {out_dir} has no {LAST}; pass hydra.run.dir=<the run to resume>")
    left = leftovers(out_dir) if found is None and refuse_existing_run else []
    recorded = _recorded_config(out_dir) if mode == "auto" and left and set(left) <= ATTEMPT_FILES else None
    if not left or (
        recorded is not None and config is not None and config_changes(recorded, config, _also_safe(algorithm))[0] == {}
    ):
        if left:
            log.warning(
                "%s: an attempt of this run stopped before its first checkpoint (%s): starting it again",
                out_dir,
                ", ".join(left),
            )
        return found
    shown = ", ".join(left[:6]) + (", ..." if len(left) > 6 else "")
    if (out_dir / LAST).is_file():
        raise RunDirectoryError(
            f"{out_dir} already holds a run ({shown}): continue it with resume=auto, or start "
            "a new run in another directory (hydra.run.dir=...)"
        )
    what = "a run without a last.pt to continue" if held_run_files(out_dir) else "files"
    raise RunDirectoryError(
        f"{out_dir} already holds {what} ({shown}): a new run there would overwrite them; start "
        "it in another directory (hydra.run.dir=...)"
    )


def _changed(stored: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple]:
    """``{key: (stored, new)}`` of every flattened key of ``new`` whose value differs from ``stored``'s."""
    old, now = flatten(stored), flatten(new)
    missing = "<absent>"
    return {key: (old.get(key, missing), now[key]) for key in sorted(now) if old.get(key, missing) != now[key]}


def config_changes(
    stored: dict[str, Any], new: dict[str, Any], also_safe: tuple[str, ...] = ()
) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """(unsafe, safe) changes between a checkpoint's config (on this version's schemas: ``stored_config``) and
    the new one: ``{key: (stored, new)}``; ``also_safe``: the algorithm's own safe keys."""
    changed = _changed(stored, new)
    unsafe = {key: change for key, change in changed.items() if not is_incidental(key, (*RESUME_SAFE, *also_safe))}
    return unsafe, {key: change for key, change in changed.items() if key not in unsafe}


def _also_safe(algorithm: type[Algorithm]) -> tuple[str, ...]:
    """The keys ``algorithm`` may change on resume beyond ``RESUME_SAFE``: its own, and the graph settings it never
    reads."""
    return algorithm.resume_safe + (() if algorithm.capabilities.scene_splits else GRAPH_KEYS)


def _recorded_config(out_dir: Path) -> dict[str, Any] | None:
    """The config ``out_dir``'s run was accepted with (``.hydra/config.yaml``) on this version's schemas,
    resolved; None when that record cannot be read."""
    try:
        recorded = OmegaConf.to_container(OmegaConf.load(out_dir / HYDRA_RECORD / HYDRA_CONFIG))
        return OmegaConf.to_container(stored_config(recorded), resolve=True)
    except (OSError, ValueError, TypeError, OmegaConfBaseException):
        return None


def finished_score(out_dir: Path, config: dict[str, Any]) -> float | None:
    """The best validation score of the run that already finished in ``out_dir`` with these settings (its
    ``summary.json`` written at ``train.steps``, nothing that defines it changed since), or None: the same command
    re-issued after a sweep was killed skips the jobs that finished and returns what they found."""
    summary = read_object(out_dir / SUMMARY)
    if summary is None or summary.get("steps") != config["train"]["steps"]:
        return None
    best = [value for key, value in summary.items() if key.startswith("best_") and isinstance(value, (int, float))]
    recorded = _recorded_config(out_dir)
    if len(best) != 1 or recorded is None:
        return None
    if any(not is_incidental(key) for key in _changed(recorded, config)):
        return None
    return float(best[0])


def check_resume_config(
    path: Path, stored: dict[str, Any], new: dict[str, Any], algorithm: type[Algorithm] = Algorithm
) -> dict[str, tuple]:
    """Refuse changes that break exact resumption, naming each key and how else to go on (the algorithm's
    ``restart_hint``); return the safe ones (warned)."""
    unsafe, safe = config_changes(stored, new, _also_safe(algorithm))
    if unsafe:
        listed = "; ".join(f"{key}: {old} -> {now}" for key, (old, now) in unsafe.items())
        raise ConfigError(
            f"resume from {path}: these settings differ from the run's and would break exact "
            f"resumption: {listed}. Resume with the original values, or "
            f"{algorithm.restart_hint.format(path=path)}"
        )
    if safe:
        log.warning(
            "resume: applying changed settings %s",
            ", ".join(f"{key}={now} (was {old})" for key, (old, now) in safe.items()),
        )
    return safe


def check_history(out_dir: Path, path: Path, ckpt: dict[str, Any]) -> None:
    """The history must still hold every row the checkpoint saw written: fewer means it was cut or damaged
    after the fact (not a line torn by a kill), and continuing would leave a hole in the run's record."""
    history = out_dir / HISTORY
    if not history.exists():
        return  # moved aside on purpose: the continued history starts at the checkpoint
    step, recorded = ckpt["state"]["step"], ckpt.get("history_rows")
    kept = sum(1 for row in read_history(out_dir) if row.get("step", 0) <= step)
    if isinstance(recorded, int) and kept < recorded:
        raise RunDirectoryError(
            f"{history} is damaged: it holds {kept} rows up to step {step}, but {path} was "
            f"written after {recorded}; restore it from a copy, or move it aside to continue "
            "with a history that starts at the checkpoint"
        )
