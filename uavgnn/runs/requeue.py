"""A job its scheduler stops (preemption, the time limit) is requeued and resumes exactly where it stopped.

When a signal (SIGTERM, SIGUSR1, SIGUSR2) stops training at the end of a step with ``last.pt`` written, and
the run is a job its scheduler can requeue - a submitit job (submitit's own handler for its signal,
``SUBMITIT_PREEMPT_SIGNAL``, USR2 by default: it requeues the job, ``max_num_timeout`` bounding the
time-limit requeues) or a SLURM job (``scontrol requeue``) - rank 0 records ``requeued.json`` in the run
directory and asks for the requeue. The requeued job runs the same command in the same directory:
``pending`` makes it resume from ``last.pt`` whatever ``resume`` says, and the record is removed once it has.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.console import echo
from uavgnn.infrastructure.signals import EXIT_CODES
from uavgnn.infrastructure.storage import atomic_write
from uavgnn.runs.layout import REQUEUED

log = logging.getLogger(__name__)
# How long ``scontrol requeue`` may take: well under SLURM's KillWait (30 s by default), the time between the
# scheduler's SIGTERM and its SIGKILL, so a hanging controller costs the requeue, never the stop itself.
SCONTROL_TIMEOUT_S = 10.0


def requeue(out_dir: Path, step: int, why: str, exit_code: int) -> None:
    """Ask this job's scheduler to requeue it, rank 0 having recorded where it stopped; nothing where no
    scheduler can (a run outside one ends as any interrupted run) or after Ctrl-C (a person, not the
    scheduler). Under submitit rank 0 does not return: submitit ends the process with the code its executor
    requeues on."""
    handler, signum = _submitit_handler()
    job_id = os.environ.get("SLURM_JOB_ID")
    if (handler is None and job_id is None) or exit_code == EXIT_CODES[signal.SIGINT]:
        return
    main = distributed.context().is_main
    if main:
        atomic_write(out_dir / REQUEUED, json.dumps({"step": step, "why": why}).encode())
    if handler is not None:
        echo(f"requeued by the scheduler: the job resumes from step {step}", err=True)
        handler(signum, None)  # submitit: rank 0 requeues and exits; the other ranks return
    elif main:
        try:
            _scontrol_requeue(job_id)
        except (OSError, subprocess.SubprocessError) as err:
            (out_dir / REQUEUED).unlink(missing_ok=True)
            log.warning("SLURM job %s: scontrol requeue failed (%s): not requeued", job_id, err)
            return
        echo(f"requeued by the scheduler: the job resumes from step {step}", err=True)


def _scontrol_requeue(job_id: str) -> None:
    """``scontrol requeue JOB``, in a session of its own so that on ``SCONTROL_TIMEOUT_S`` it goes with all it
    started (``subprocess.run``'s timeout kills the direct child alone, orphaning the rest), reaped before this
    returns. Raises ``TimeoutExpired`` or ``CalledProcessError`` (stderr attached)."""
    proc = subprocess.Popen(
        ["scontrol", "requeue", job_id],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, stderr = proc.communicate(timeout=SCONTROL_TIMEOUT_S)
    finally:
        if proc.returncode is None:  # timed out (or interrupted): the whole process group goes
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass  # already gone
            proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                pipe.close()
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, proc.args, stderr=stderr)


def pending(out_dir: Path) -> dict[str, Any] | None:
    """What ``requeue`` recorded in ``out_dir`` (the step it stopped at), if this is the requeued job."""
    try:
        record = json.loads((out_dir / REQUEUED).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("step"), int) else None


def done(out_dir: Path) -> None:
    """The requeued job has resumed: the record goes."""
    (out_dir / REQUEUED).unlink(missing_ok=True)


def _submitit_handler() -> tuple[Callable[..., Any] | None, int]:
    """submitit's requeue handler and its signal, if this process is a submitit job (submitit sets it)."""
    name = "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    signum = getattr(signal, name, signal.SIGUSR2)
    handler = signal.getsignal(signum)
    owner = getattr(handler, "__self__", None)
    is_submitit = owner is not None and type(owner).__module__.startswith("submitit")
    return (handler if is_submitit else None), signum
