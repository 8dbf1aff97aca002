"""MILP labels for many scenes, solved in worker processes with a progress bar.

Workers must never outlive the run: they are killed when labelling ends with
an error or Ctrl-C (the executor sees them gone and shuts down), and each
worker asks the kernel to kill it when its parent dies (``PR_SET_PDEATHSIG``), which covers
``kill -9`` and SIGTERM of the main process; where that call is unavailable, a
watcher thread notices the parent is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from uavgnn.infrastructure.console import progress
from uavgnn.problem.scenes import Scene
from uavgnn.solvers import SolveResult, solve_milp

INLINE_BELOW = 64  # fewer scenes than this are solved in-process: spawning workers costs more
PR_SET_PDEATHSIG = 1


_worker_scenes: list[Scene] = []  # in a worker: the scenes it inherited at fork (jobs are just their indices)
_worker_time_limit = 0.0


def _label(indices: range) -> list[SolveResult]:
    return [solve_milp(_worker_scenes[i], time_limit=_worker_time_limit) for i in indices]


def _start_worker(parent: int, scenes: list[Scene], time_limit: float) -> None:
    """Worker initializer: take the scenes (shared by fork, never pickled) and end this worker as soon as
    the process that started it is gone."""
    global _worker_scenes, _worker_time_limit
    _worker_scenes, _worker_time_limit = scenes, time_limit
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle (it kills the workers)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not a handler forked from the parent (submitit ignores SIGTERM)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    else:

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=watch, daemon=True).start()
    if os.getppid() != parent:  # the parent died before the request above took effect
        os._exit(1)


def solve_labels(scenes: list[Scene], time_limit: float, workers: int, desc: str = "MILP labels") -> list[SolveResult]:
    """Exact assignments of ``scenes`` (order kept). Workers are forked: they only run numpy/scipy, unlike
    spawn fork works from scripts without a main guard, and they inherit the scenes, so a job is an index.
    (Pickled scenes once filled the pipe to killed workers and hung the interpreter's exit after Ctrl-C.)"""
    bar = dict(total=len(scenes), desc=desc, unit="scene", leave=False)
    if workers <= 1 or len(scenes) < INLINE_BELOW:
        return [solve_milp(s, time_limit=time_limit) for s in progress(scenes, **bar)]
    chunk = max(1, min(64, len(scenes) // (8 * workers)))
    results: list[SolveResult] = []
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=mp.get_context("fork"),
        initializer=_start_worker,
        initargs=(os.getpid(), scenes, time_limit),
    )
    try:
        with progress(**bar) as shown:
            chunks = [pool.submit(_label, range(i, min(i + chunk, len(scenes)))) for i in range(0, len(scenes), chunk)]
            for future in chunks:
                results += future.result()
                shown.update(len(results) - shown.n)
    except BaseException:  # Ctrl-C or any error: no worker outlives the labelling (the pool sees them gone
        workers_left = mp.active_children()  # and fails the pending chunks, which nobody waits for)
        for worker in workers_left:
            worker.kill()
        for worker in workers_left:
            worker.join(timeout=5)  # reaped, not left as zombies
        raise
    finally:
        # a SIGTERM inside the first submit can stop the pool's manager thread between its creation and its start:
        # joining it then raises, and that error would replace the interrupt the user should see (exit 143)
        with contextlib.suppress(RuntimeError):
            pool.shutdown(wait=True)
    return results


def status_counts(results: list[SolveResult]) -> dict[str, int]:
    names, counts = np.unique([r.status for r in results], return_counts=True)
    return {str(n): int(c) for n, c in zip(names, counts)}
