"""The command line: ``uavgnn ...``, ``python -m uavgnn ...`` and ``python run.py ...`` are the same program.

The configs ship inside the package (``uavgnn/conf``), so an installed uavgnn
runs from any directory; run directories land under the current directory.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import hydra
from hydra._internal import utils as hydra_utils
from joblib.externals.loky.process_executor import TerminatedWorkerError
from omegaconf import DictConfig

from uavgnn.config import register_configs
from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.console import echo
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.infrastructure.signals import EXIT_CODES
from uavgnn.program.callbacks import SWEEP_CONTINUE_COMMAND, SWEEP_FAILED_EXIT
from uavgnn.program.composition import COMPOSITION_ERRORS, composition_error
from uavgnn.program.help import register_help
from uavgnn.program.job import run_mode
from uavgnn.runs import sweep_worker
from uavgnn.runs.directory import discard_refused_sweep

try:  # before Hydra composes; a launcher's workers import this module too
    register_configs()
    register_help()
except ConfigError as err:  # an algorithm plug-in that does not load: one line, as every user error
    echo(f"error: {err}", err=True)
    raise SystemExit(2) from None


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> float | None:
    return run_mode(cfg)


def main() -> None:
    """Console-script entry point: join ``torchrun``'s process group (if any), then let Hydra parse the arguments."""
    sweep_worker.mark_main()  # a launcher's workers inherit it: they know they are workers
    distributed.init_from_launcher()  # before Hydra: every rank must agree on the run directory
    try:
        with composition_errors_in_one_line():
            _hydra_main()
    finally:
        distributed.shutdown()


@contextmanager
def composition_errors_in_one_line() -> Iterator[None]:
    """Hydra's errors composing the config (``modle=small``, ``model=smal``, ``train.stpes=3``,
    ``train.steps=abc``) end as every user error does: one line ``error: ...`` with a did-you-mean, exit 2, no
    directory left (Hydra's own report: several lines, a ``+key=value`` hint, exit 1). Hydra reports them in
    ``run_and_report``, around composing and running a run, a sweep, ``--cfg``; this wraps what it runs, so the
    errors of the run itself (a job's traceback) and ``HYDRA_FULL_ERROR=1`` stay Hydra's."""
    report = getattr(hydra_utils, "run_and_report", None)
    if report is None:  # another Hydra: its own report
        yield
        return

    def run_and_report(func: Callable[[], Any]) -> Any:
        return report(lambda: _one_line_on_composition_error(func))

    hydra_utils.run_and_report = run_and_report
    try:
        yield
    finally:
        hydra_utils.run_and_report = report


def _one_line_on_composition_error(func: Callable[[], Any]) -> Any:
    try:
        return func()
    except TerminatedWorkerError as err:  # a launcher's worker signalled or killed: not a 40-line traceback
        if not SWEEP_CONTINUE_COMMAND:
            raise
        codes = re.search(r"\{([^}]*)\}", str(err))
        shown = codes.group(1) if codes else "killed"
        echo(
            f"sweep stopped: a job's worker process ended ({shown}) and the launcher stopped the others; each job "
            f"resumes from its last checkpoint: continue it with: {SWEEP_CONTINUE_COMMAND[0]}",
            err=True,
        )
        signalled = "SIGTERM" in shown or "143" in shown
        raise SystemExit(EXIT_CODES[signal.SIGTERM] if signalled else SWEEP_FAILED_EXIT) from None
    except COMPOSITION_ERRORS as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or _raised_by_a_job(err):
            raise
        echo(f"error: {composition_error(err)}", err=True)
        discard_refused_sweep()  # Hydra made a sweep's directory before composing its jobs
        raise SystemExit(2) from None


def _raised_by_a_job(err: BaseException) -> bool:
    """Raised inside a job (Hydra's ``run_job``: the run itself), not while composing its config."""
    tb = err.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "run_job":
            return True
        tb = tb.tb_next
    return False
