"""Dispatch a composed config to its mode; user errors end with a one-line message; nothing is written into
the run directory before the run is accepted (``uavgnn.run_dir``), and a directory that was never accepted
is removed again."""

from __future__ import annotations

import importlib
import traceback
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from uavgnn import distributed, requeue, run_dir, run_lock, signals, sweep_worker
from uavgnn.algorithms import check_config
from uavgnn.console import attach_run_log, echo
from uavgnn.errors import (CheckpointError, ConfigError, Interrupted, MemoryBudgetError, ProblemTooLarge,
                           RunDirectoryError, SceneFileError, StorageError, TrainingDiverged)
from uavgnn.report import write_json
from uavgnn.runtime import apply_threads

REPORTS_ELSEWHERE = ("cache", "compare")  # they accept their own directory only when they write into it
USER_ERRORS = (ConfigError, SceneFileError, ProblemTooLarge, MemoryBudgetError, TrainingDiverged, CheckpointError,
               StorageError, RunDirectoryError, FileNotFoundError)


def run_mode(cfg: DictConfig) -> float | None:
    """Run ``cfg.mode``. In a multirun a failing job writes ``failed.json`` and returns NaN
    to the sweeper instead of ending the sweep (the sweep's exit code reports it at the end)."""
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    attach_run_log()
    sweep = HydraConfig.get().mode == RunMode.MULTIRUN
    restore_signals = signals.install(cfg.mode)  # a one-line stop in every phase, not a silent exit 143
    try:
        if sweep:
            return _sweep_job(cfg, out_dir)
        return _dispatch(cfg, out_dir)
    except USER_ERRORS as err:
        echo(f"error: {err}", err=True)
        run_dir.withdraw(out_dir)  # refused before it wrote anything: nothing is left behind
        raise SystemExit(2) from None
    except Interrupted as err:
        echo(str(err), err=True)
        if err.saved_step is not None:  # under a scheduler that can, the job is requeued and resumes
            requeue.requeue(out_dir, err.saved_step, str(err).split(";")[0], err.exit_code)
        _finish(out_dir)
        sweep_worker.exit_worker(err.exit_code)  # a launcher's worker ends here instead of taking more work
        raise SystemExit(err.exit_code) from None
    except KeyboardInterrupt:
        echo("interrupted (Ctrl-C)", err=True)
        raise SystemExit(130) from None
    finally:
        restore_signals()
        _finish(out_dir)


def _finish(out_dir: Path) -> None:
    """Remove the directory if this process created it for a run never accepted (while still holding its lock,
    so no other process can have claimed it meanwhile), then give the lock up."""
    accepted = run_dir.is_accepted(out_dir)
    run_dir.discard_unaccepted(out_dir)
    run_lock.release(out_dir, accepted)


def _sweep_job(cfg: DictConfig, out_dir: Path) -> float | None:
    try:
        return _dispatch(cfg, out_dir)
    except Interrupted:
        raise  # a signal stops the whole sweep, not just this job
    except Exception as err:  # noqa: BLE001 - one job's failure must not stop the sweep
        echo(f"job failed: {type(err).__name__}: {err}", err=True)
        record = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc(),
                  "config": OmegaConf.to_container(cfg, resolve=False)}
        if run_dir.leftovers(out_dir) and not run_dir.is_accepted(out_dir):  # another run's files: left as they are;
            write_json(run_dir.refused_job_record(out_dir), record)  # the sweep still counts the job as failed
        else:
            run_dir.accept(out_dir, cfg)
            write_json(out_dir / run_dir.FAILED_RECORD, record)
        return float("nan")


# mode -> module and function ``f(cfg, out_dir)``, imported on use so each mode loads only what it needs
MODES = {"train": ("uavgnn.modes.train", "run_train"), "eval": ("uavgnn.modes.evaluate", "run_eval"),
         "solve": ("uavgnn.modes.solve", "run_solve"), "compare": ("uavgnn.modes.compare", "run_compare"),
         "info": ("uavgnn.modes.info", "run_info"), "profile": ("uavgnn.modes.profile", "run_profile"),
         "benchmark": ("uavgnn.modes.benchmark", "run_benchmark"), "rollouts": ("uavgnn.modes.rollouts", "run_rollouts")}


def _dispatch(cfg: DictConfig, out_dir: Path) -> float | None:
    """Run the mode; ``train`` returns its best validation gap (the value a sweeper minimises)."""
    distributed.quiet_other_ranks()
    check_resolvable(cfg)
    check_config(cfg)
    apply_threads(cfg.hardware.threads)  # before the run record names them, and before any work
    if cfg.mode not in (*REPORTS_ELSEWHERE, "train"):  # train accepts once every resume check has passed
        left = run_dir.leftovers(out_dir)
        if not left:
            run_dir.accept(out_dir, cfg)
        else:
            raise RunDirectoryError(f"{out_dir} already holds {', '.join(left[:6])}{', ...' if len(left) > 6 else ''}: "
                                    f"mode={cfg.mode} writes its results into a directory of its own; leave out "
                                    "hydra.run.dir or choose another")
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


def check_resolvable(cfg: DictConfig) -> None:
    """Every interpolation of the config resolves, or a ``ConfigError`` naming the key that does not
    (``model.hidden='${oc.env:NOPE}'``), before any work."""
    try:
        OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "the config"
        cause = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"{key}: cannot be resolved ({cause})") from None
