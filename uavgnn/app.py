"""Dispatch a composed config to its mode; user errors end with a one-line message; nothing is written into
the run directory before the run is accepted (``uavgnn.run_dir``), and a directory that was never accepted
is removed again."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from types import FrameType
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from uavgnn import distributed, run_dir, run_lock, sweep_worker
from uavgnn.console import attach_run_log, echo
from uavgnn.errors import (CheckpointError, ConfigError, Interrupted, MemoryBudgetError, ProblemTooLarge,
                           RunDirectoryError, SceneFileError, StorageError, TrainingDiverged)
from uavgnn.report import write_json
from uavgnn.validation import validate

REDELIVER_S = 0.05  # a SIGTERM whose exception Python dropped is sent again this much later
REPORTS_ELSEWHERE = ("cache", "compare")  # they accept their own directory only when they write into it
USER_ERRORS = (ConfigError, SceneFileError, ProblemTooLarge, MemoryBudgetError, TrainingDiverged, CheckpointError,
               StorageError, RunDirectoryError, FileNotFoundError)


def run_mode(cfg: DictConfig) -> float | None:
    """Run ``cfg.mode``. In a multirun a failing job writes ``failed.json`` and returns NaN
    to the sweeper instead of ending the sweep (the sweep's exit code reports it at the end)."""
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    attach_run_log()
    sweep = HydraConfig.get().mode == RunMode.MULTIRUN
    previous = _on_sigterm(cfg.mode)  # a one-line stop in every phase, not a silent exit 143
    try:
        if sweep:
            return _sweep_job(cfg, out_dir)
        return _dispatch(cfg, out_dir)
    except USER_ERRORS as err:
        echo(f"error: {err}", err=True)
        raise SystemExit(2) from None
    except Interrupted as err:
        echo(str(err), err=True)
        _finish(out_dir)
        sweep_worker.exit_worker(err.exit_code)  # a launcher's worker ends here instead of taking more work
        raise SystemExit(err.exit_code) from None
    except KeyboardInterrupt:
        echo("interrupted (Ctrl-C)", err=True)
        raise SystemExit(130) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
            sys.unraisablehook = sys.__unraisablehook__
        _finish(out_dir)


def _on_sigterm(mode: str) -> object:
    """SIGTERM outside the training loop (which stops at the end of a step on its own) raises ``Interrupted``:
    the run ends with one line saying so. Returns the handler it replaced (None off the main thread).

    Python drops an exception raised where it cannot propagate (e.g. in the at-fork callbacks ``logging``
    registers, when a label worker is forked): ``_redeliver`` catches that one and sends the signal again a
    moment later, from another thread, so it lands on a line that can raise."""
    def stop(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(f"interrupted by SIGTERM (mode={mode})", 143)

    if threading.current_thread() is not threading.main_thread():
        return None
    sys.unraisablehook = _redeliver
    return signal.signal(signal.SIGTERM, stop)


def _redeliver(unraisable: Any) -> None:
    if isinstance(unraisable.exc_value, Interrupted):
        threading.Timer(REDELIVER_S, os.kill, (os.getpid(), signal.SIGTERM)).start()
    else:
        sys.__unraisablehook__(unraisable)


def _finish(out_dir: Path) -> None:
    """Give up the directory's lock; remove the directory if this process created it for a run never accepted."""
    run_lock.release(out_dir, run_dir.is_accepted(out_dir))
    run_dir.discard_unaccepted(out_dir)


def _sweep_job(cfg: DictConfig, out_dir: Path) -> float | None:
    try:
        return _dispatch(cfg, out_dir)
    except Interrupted:
        raise  # a signal stops the whole sweep, not just this job
    except Exception as err:  # noqa: BLE001 - one job's failure must not stop the sweep
        echo(f"job failed: {type(err).__name__}: {err}", err=True)
        if run_dir.leftovers(out_dir) and not run_dir.is_accepted(out_dir):
            return float("nan")  # the directory holds another run's files: they stay as they are
        run_dir.accept(out_dir, cfg)
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
    check_resolvable(cfg)
    validate(cfg)
    if cfg.mode not in REPORTS_ELSEWHERE:
        left = run_dir.leftovers(out_dir)
        if not left and distributed.context().is_main:
            run_dir.accept(out_dir, cfg)
        elif left and cfg.mode != "train":  # train decides itself: a resume may continue the run held there
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
