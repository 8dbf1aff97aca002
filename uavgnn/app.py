"""Dispatch a composed config to its mode; user errors end with a one-line message; a utility mode
(cache, info, compare) leaves no run directory of its own behind when it wrote nothing there."""

from __future__ import annotations

import importlib
import shutil
import traceback
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from uavgnn import distributed, run_lock
from uavgnn.console import attach_run_log, echo
from uavgnn.errors import (CheckpointError, ConfigError, Interrupted, ProblemTooLarge, RunDirectoryError,
                           SceneFileError, StorageError, TrainingDiverged)
from uavgnn.report import write_json
from uavgnn.validation import validate

UTILITY_MODES = ("cache", "info", "compare")  # they report on other directories: theirs may stay empty
BOOKKEEPING = {".hydra", "run.log", run_lock.LOCK_FILE}  # what Hydra and the lock put into every run directory
USER_ERRORS = (ConfigError, SceneFileError, ProblemTooLarge, TrainingDiverged, CheckpointError, StorageError,
               RunDirectoryError, FileNotFoundError)


def run_mode(cfg: DictConfig) -> float | None:
    """Run ``cfg.mode``. In a multirun a failing job writes ``failed.json`` and returns NaN
    to the sweeper instead of ending the sweep (the sweep's exit code reports it at the end)."""
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    attach_run_log()
    sweep = HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        if sweep:
            return _sweep_job(cfg, out_dir)
        return _dispatch(cfg, out_dir)
    except USER_ERRORS as err:
        echo(f"error: {err}", err=True)
        raise SystemExit(2) from None
    except Interrupted as err:
        echo(str(err), err=True)
        raise SystemExit(err.exit_code) from None
    except KeyboardInterrupt:
        echo("interrupted (Ctrl-C)", err=True)
        raise SystemExit(130) from None
    finally:
        if cfg.mode in UTILITY_MODES and not sweep:
            drop_if_empty(out_dir)


def drop_if_empty(directory: Path) -> None:
    """Remove a run directory that holds only Hydra's bookkeeping, and its date folder if that is left empty."""
    if not directory.is_dir() or {p.name for p in directory.iterdir()} - BOOKKEEPING:
        return
    shutil.rmtree(directory, ignore_errors=True)
    for parent in (directory.parent, directory.parent.parent):  # outputs/<date>, then outputs
        try:
            parent.rmdir()
        except OSError:  # not empty: other runs live there
            break


def _sweep_job(cfg: DictConfig, out_dir: Path) -> float | None:
    try:
        return _dispatch(cfg, out_dir)
    except Interrupted:
        raise  # a signal stops the whole sweep, not just this job
    except Exception as err:  # noqa: BLE001 - one job's failure must not stop the sweep
        echo(f"job failed: {type(err).__name__}: {err}", err=True)
        write_json(out_dir / "failed.json", {"error": f"{type(err).__name__}: {err}",
                                             "traceback": traceback.format_exc(),
                                             "config": OmegaConf.to_container(cfg, resolve=False)})
        return float("nan")


# mode -> module and function ``f(cfg, out_dir)``, imported on use so each mode loads only what it needs
MODES = {"train": ("uavgnn.modes.train", "run_train"), "eval": ("uavgnn.modes.evaluate", "run_eval"),
         "solve": ("uavgnn.modes.solve", "run_solve"), "compare": ("uavgnn.modes.compare", "run_compare"),
         "info": ("uavgnn.modes.info", "run_info"), "profile": ("uavgnn.modes.profile", "run_profile"),
         "benchmark": ("uavgnn.modes.benchmark", "run_benchmark"), "rollouts": ("uavgnn.modes.rollouts", "run_rollouts")}


def _dispatch(cfg: DictConfig, out_dir: Path) -> float | None:
    """Run the mode; ``train`` returns its best validation gap (the value a sweeper minimises)."""
    distributed.quiet_other_ranks()
    validate(cfg)
    if cfg.mode == "cache":
        from uavgnn.modes.cache import run_cache
        if run_cache(cfg):
            raise SystemExit(1)  # verify found damaged entries
        return None
    if cfg.mode not in MODES:
        raise ConfigError(f"mode: unknown mode {cfg.mode!r}")
    module, function = MODES[cfg.mode]
    result = getattr(importlib.import_module(module), function)(cfg, out_dir)
    return result if cfg.mode == "train" else None
