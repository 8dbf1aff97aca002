"""A sweep's worker processes end with the sweep.

A launcher such as joblib runs jobs in worker processes of its own. When the sweep's main process is killed,
those workers used to train on, holding their run directories' locks, and after a SIGTERM they went back to
the launcher for more work. Here a job that runs in such a worker (its pid is not the main process's, which
``mark_main`` records in the environment the workers inherit) watches its parent: when the parent is gone,
the worker sends itself SIGTERM, so training stops at the end of the step with ``last.pt`` written, exactly
as a SIGTERM from a user would; and a worker whose job was interrupted exits instead of taking the next one
(``exit_worker``). A worker watches from the moment it imports the program (``uavgnn.program``), before its
heavy imports; before that - a launcher's worker still starting, or idle - nothing of ours runs in it, so the
sweep's main process also starts a reaper (``start_reaper``): a small process that, once the main process is gone
(kill -9 included), sends SIGTERM to every process that inherited its ``UAVGNN_MAIN_PID`` (Linux ``/proc``).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time

MAIN_PID_ENV = "UAVGNN_MAIN_PID"
POLL_S = 0.5

_watching = False


def mark_main() -> None:
    """This process is the one the user started (called by the entry point before Hydra runs)."""
    os.environ[MAIN_PID_ENV] = str(os.getpid())


def main_pid() -> int | None:
    """The pid of the sweep's main process this process belongs to (None outside a uavgnn program)."""
    main = os.environ.get(MAIN_PID_ENV)
    return int(main) if main else None


def in_worker() -> bool:
    """Whether this process is a launcher's worker: started by a uavgnn main process, but not it."""
    main = os.environ.get(MAIN_PID_ENV)
    return main is not None and main != str(os.getpid())


def watch_sweep() -> None:
    """In a worker: SIGTERM this process as soon as the process that started it is gone (a no-op elsewhere)."""
    global _watching
    if _watching or not in_worker():
        return
    _watching = True
    main, parent = int(os.environ[MAIN_PID_ENV]), os.getppid()

    def watch() -> None:
        # a worker whose main process was killed while it was still starting has been handed to another parent
        # already: it stops at once instead of watching that one
        while os.getppid() == parent and (parent == main or alive(main)):
            time.sleep(POLL_S)
        logging.getLogger(__name__).warning("the sweep's main process %d is gone: stopping this job", main)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="uavgnn-sweep-watch", daemon=True).start()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


REAPER = """
import os, signal, sys, time
main, me = int(sys.argv[1]), os.getpid()
while os.getppid() == main:
    time.sleep(float(sys.argv[2]))
mark = f"{sys.argv[3]}={main}".encode()
for entry in os.listdir("/proc"):
    if entry.isdigit() and int(entry) != me:
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if mark in f.read().split(b"\\0"):
                    os.kill(int(entry), signal.SIGTERM)
        except OSError:
            pass
"""


_reaper: list[subprocess.Popen] = []


def start_reaper() -> None:
    """In a sweep's main process: the reaper that stops this sweep's processes once this one is gone - killed,
    or at its normal end (then any process of the sweep still there: none, unless a launcher left one)."""
    if in_worker() or not os.path.isdir("/proc") or _reaper:
        return
    _reaper.append(
        subprocess.Popen(
            [sys.executable, "-S", "-c", REAPER, str(os.getpid()), str(POLL_S), MAIN_PID_ENV],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    )


def exit_worker(code: int) -> None:
    """End a worker process whose job was interrupted, instead of returning it to the launcher for more work."""
    if not in_worker():
        return
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
