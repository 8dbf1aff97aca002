"""One Hydra job: the composed config checked and dispatched to its mode (``uavgnn.config.modes``).

A user error ends with a one-line message; nothing is written into the run directory before the run is accepted
(``uavgnn.runs.directory``), and a directory that was never accepted is removed again. In a sweep, a failing job
records ``failed.json`` and the sweep goes on.
"""

from __future__ import annotations

import importlib
import traceback
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from uavgnn.algorithms.registry import check_config
from uavgnn.algorithms.run_config import training_config
from uavgnn.config.modes import MODES
from uavgnn.envs.your_env import raised_by_your_env
from uavgnn.infrastructure import distributed, signals
from uavgnn.infrastructure.console import attach_run_log, echo, say_once
from uavgnn.infrastructure.errors import (
    CheckpointError,
    ConfigError,
    Interrupted,
    MemoryBudgetError,
    ProblemTooLarge,
    RunDirectoryError,
    SceneFileError,
    StorageError,
    TrainingDiverged,
)
from uavgnn.infrastructure.storage import write_json
from uavgnn.infrastructure.threads import apply_threads
from uavgnn.program.presets import replaced_hardware
from uavgnn.runs import requeue, sweep_worker
from uavgnn.runs.directory import (
    accept,
    discard_unaccepted,
    discard_untrained,
    is_accepted,
    leftovers,
    refuse_leftovers,
    refused_job_record,
    withdraw,
)
from uavgnn.runs.layout import FAILED
from uavgnn.runs.lock import release_lock

USER_ERRORS = (
    ConfigError,
    SceneFileError,
    ProblemTooLarge,
    MemoryBudgetError,
    TrainingDiverged,
    CheckpointError,
    StorageError,
    RunDirectoryError,
    FileNotFoundError,
)


def run_mode(cfg: DictConfig, exits: bool = True) -> float | None:
    """Run ``cfg.mode``. In a multirun a failing job writes ``failed.json`` and returns NaN
    to the sweeper instead of ending the sweep (the sweep's exit code reports it at the end). ``exits=False``
    (``uavgnn.api.train``): a user error is raised as itself once its line is said and its directory tidied, not
    turned into ``SystemExit(2)``."""
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
        withdraw(out_dir)  # refused before it wrote anything: nothing is left behind
        if not exits:
            raise
        raise SystemExit(2) from None
    except Interrupted as err:
        echo(str(err), err=True)
        if err.saved_step is not None:  # under a scheduler that can, the job is requeued and resumes
            requeue.requeue(out_dir, err.saved_step, str(err).split(";")[0], err.exit_code)
        _finish(out_dir)
        sweep_worker.exit_worker(err.exit_code)  # a launcher's worker ends here instead of taking more work
        if not exits:
            raise
        raise SystemExit(err.exit_code) from None
    except Exception as err:
        yours = raised_by_your_env(OmegaConf.select(cfg, "env.target", default=None), err)
        if yours is None or not exits:
            raise
        echo(f"error: {yours}", err=True)
        discard_untrained(out_dir)  # nothing trained: no run directory left behind
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        echo("interrupted (Ctrl-C)", err=True)
        if not exits:
            raise
        raise SystemExit(130) from None
    finally:
        restore_signals()
        _finish(out_dir)


def _finish(out_dir: Path) -> None:
    """Remove the directory if this process created it for a run never accepted (while still holding its lock,
    so no other process can have claimed it meanwhile), then give the lock up."""
    accepted = is_accepted(out_dir)
    discard_unaccepted(out_dir)
    release_lock(out_dir, accepted)


def _sweep_job(cfg: DictConfig, out_dir: Path) -> float | None:
    try:
        return _dispatch(cfg, out_dir)
    except Interrupted:
        raise  # a signal stops the whole sweep, not just this job
    except Exception as err:  # noqa: BLE001 - one job's failure must not stop the sweep
        echo(f"job failed: {type(err).__name__}: {err}", err=True)
        record = {
            "error": f"{type(err).__name__}: {err}",
            "traceback": traceback.format_exc(),
            "config": OmegaConf.to_container(cfg, resolve=False),
        }
        if leftovers(out_dir) and not is_accepted(out_dir):  # another run's files: left as they are;
            write_json(refused_job_record(out_dir), record)  # the sweep still counts the job as failed
        else:
            accept(out_dir, cfg)
            write_json(out_dir / FAILED, record)
        return float("nan")


def _dispatch(cfg: DictConfig, out_dir: Path) -> float | None:
    """Run the mode; ``train`` returns its best validation gap (the value a sweeper minimises)."""
    distributed.quiet_other_ranks()
    check_resolvable(cfg)  # first: everything below reads the config
    hydra = HydraConfig.get()
    note = replaced_hardware(cfg, hydra.runtime.choices, list(hydra.overrides.task), list(hydra.searchpath))
    if note:
        say_once(note)
    check_config(cfg)
    if cfg.mode == "train":  # the groups its algorithm never reads are left out of the run's config
        cfg = training_config(cfg, list(HydraConfig.get().overrides.task))
    apply_threads(cfg.hardware.threads)  # before the run record names them, and before any work
    mode = MODES[cfg.mode]
    if mode.accepts_first:
        left = leftovers(out_dir)
        if left:
            raise refuse_leftovers(out_dir, cfg.mode, left)
        accept(out_dir, cfg)
    module, function = mode.runs.split(":")
    result = getattr(importlib.import_module(module), function)(cfg, out_dir)
    return result if mode.objective else None


def check_resolvable(cfg: DictConfig) -> None:
    """Every interpolation of the config resolves, or a ``ConfigError`` naming the key that does not
    (``model.hidden='${oc.env:NOPE}'``), before any work."""
    try:
        OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "the config"
        cause = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"{key}: cannot be resolved ({cause})") from None
