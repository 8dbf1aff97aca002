"""Hydra callbacks (``hydra.callbacks`` in ``conf/config.yaml``): checks around a whole run or sweep.

- before a run or sweep: its directory must resolve (an interpolation such as
  ``${oc.env:X}`` that cannot is one line naming the key), lie outside the
  operating system's directories and be writable, else one line naming it and
  the cause (Hydra would otherwise fail with a logging traceback);
- for each job: an exclusive lock on its run directory (``uavgnn.runs.lock``),
  taken before anything is written into it, so a second process is refused at once;
  a job run by a launcher's worker process ends that process when the sweep dies
  (``uavgnn.runs.sweep_worker``);
- after a sweep: a summary of the jobs that failed in this call (their ``failed.json``, written since it
  started: a record an earlier call left, of a job since skipped or superseded, is not this call's failure)
  and a non-zero exit, so a script or CI sees that the sweep did not succeed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.console import count
from uavgnn.infrastructure.errors import ConfigError, RunDirectoryError, StorageError
from uavgnn.infrastructure.storage import check_writable, system_path_problem
from uavgnn.runs import sweep_worker
from uavgnn.runs.directory import is_accepted, job_number, note_created, sweep_command
from uavgnn.runs.layout import FAILED, HYDRA_RECORD, REFUSED_PREFIX
from uavgnn.runs.lock import hold_lock, release_lock

SWEEP_FAILED_EXIT = 1
SWEEP_CONTINUE_COMMAND: list[str] = []  # the command that continues the sweep this process runs (none outside one)
_previous_handlers: dict[int, Any] = {}


def _say_how_to_continue_on_a_signal(command: str, workers: bool) -> None:
    """SIGTERM (and SIGINT, with ``workers``: the launcher runs the jobs in processes of its own) to a sweep's
    main process: one line with the command that continues the sweep, then the signal's default action (its
    workers see it gone and stop at the end of their step; ``KeyboardInterrupt`` would make joblib kill them at
    once). A job run in this process handles them itself while it runs."""
    line = f"sweep interrupted: its jobs stop at the end of their step; continue it with: {command}\n".encode()

    def stop(signum: int, frame: FrameType | None) -> None:
        os.write(2, line)  # not sys.stderr: a signal handler may run inside its own write
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT) if workers else (signal.SIGTERM,):
            _previous_handlers[signum] = signal.signal(signum, stop)


def _restore_signal_handlers() -> None:
    for signum, handler in _previous_handlers.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    _previous_handlers.clear()


def _claim_or_exit(config: DictConfig, key: str, lock: bool) -> None:
    """The directory at ``key`` resolves, is not a system directory, is writable (and, with ``lock``, now
    ours), or the run ends with one line."""
    try:
        directory = Path(resolved(config, key))
        problem = system_path_problem(directory)
        if problem:
            raise StorageError(
                f"{key}={directory}: {problem}: runs write checkpoints and logs there; choose a directory of your own"
            )
        owner = lock and distributed.context().is_main  # torchrun's other ranks share rank 0's directory
        if (
            distributed.context().is_main
        ):  # a sweep's too: one whose jobs do not compose removes it (uavgnn.program.cli)
            note_created(directory)
        check_writable(directory)
        if owner:
            hold_lock(directory)
    except (StorageError, RunDirectoryError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def resolved(config: DictConfig, key: str) -> str:
    """``config``'s value at ``key`` with its interpolations resolved, or a ``ConfigError`` naming the key."""
    try:
        return str(OmegaConf.select(config, key, throw_on_missing=True))
    except OmegaConfBaseException as err:
        cause = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"{key}: cannot be resolved ({cause})") from None


def failed_jobs(sweep_dir: Path, since: float = 0.0) -> list[tuple[str, str]]:
    """(job directory name, error) of every job of a sweep that wrote ``failed.json``, or that refused its
    directory (``<sweep dir>/failed-<job>.json``: the directory held another run's files), at ``since`` (a
    ``time.time()``) or later."""
    records = {path.parent.name: path for path in sweep_dir.glob(f"*/{FAILED}")}
    records.update({path.stem[len(REFUSED_PREFIX) :]: path for path in sweep_dir.glob(f"{REFUSED_PREFIX}*.json")})
    records = {name: path for name, path in records.items() if _written_since(path, since)}
    found = []
    for name in sorted(records, key=job_number):
        try:
            error = json.loads(records[name].read_text()).get("error", "unknown error")
        except (OSError, ValueError, AttributeError):
            error = f"failed ({records[name].name} unreadable)"
        found.append((name, error))
    return found


def _written_since(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since
    except OSError:
        return False


class RunChecks(Callback):
    def __init__(self) -> None:
        self.sweep_started = 0.0

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _claim_or_exit(config, "hydra.run.dir", lock=True)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.sweep_started = time.time()
        _claim_or_exit(config, "hydra.sweep.dir", lock=False)
        command = sweep_command(Path(resolved(config, "hydra.sweep.dir")), config.hydra.overrides.task)
        SWEEP_CONTINUE_COMMAND[:] = [command]
        launcher = str(OmegaConf.select(config, "hydra.launcher._target_", default=""))
        _say_how_to_continue_on_a_signal(command, workers="BasicLauncher" not in launcher)
        sweep_worker.start_reaper()  # its launcher's workers stop with it, even while they start

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        distributed.init_from_launcher()  # a job a launcher started as several tasks (tasks_per_node): a DDP run
        sweep_worker.watch_sweep()  # in a launcher's worker process: end with the sweep
        _claim_or_exit(config, "hydra.runtime.output_dir", lock=True)  # a sweep's job; a no-op for a single run

    def on_job_end(self, config: DictConfig, **kwargs: Any) -> None:
        directory = Path(config.hydra.runtime.output_dir)
        release_lock(directory, is_accepted(directory))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        _restore_signal_handlers()
        SWEEP_CONTINUE_COMMAND.clear()
        sweep_dir = Path(config.hydra.sweep.dir)
        if config.logger.name == "wandb" and config.logger.mode == "offline":  # once per sweep, not per job
            where = sweep_dir.resolve()  # the hint works from any directory
            print(f"wandb: offline runs in {where}/*/wandb; upload them all: wandb sync {where}/*/wandb/offline-run-*")
        failed = failed_jobs(sweep_dir, since=self.sweep_started)
        if not failed:
            return
        jobs = len({p.name for p in sweep_dir.iterdir() if (p / HYDRA_RECORD).is_dir()} | {name for name, _ in failed})
        lines = "\n".join(f"  job {name}: {error}" for name, error in failed)
        print(
            f"sweep {sweep_dir}: {len(failed)} of {count(jobs, 'job')} failed (details in each failed.json):\n{lines}",
            file=sys.stderr,
        )
        raise SystemExit(SWEEP_FAILED_EXIT)
