"""MILP labels for many scenes, solved in worker processes with a progress bar.

Workers must never outlive the run: a ``multiprocessing.Pool`` is terminated
when labelling ends for any reason (Ctrl-C included), and each worker asks the
kernel to kill it when its parent dies (``PR_SET_PDEATHSIG``), which covers
``kill -9`` and SIGTERM of the main process; where that call is unavailable, a
watcher thread notices the parent is gone.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import time

import numpy as np
from tqdm import tqdm

from uavgnn.problem.scenes import Scene
from uavgnn.solvers import SolveResult, solve_milp

INLINE_BELOW = 64  # fewer scenes than this are solved in-process: spawning workers costs more
PR_SET_PDEATHSIG = 1


def _label(args: tuple[Scene, float]) -> SolveResult:
    scene, time_limit = args
    return solve_milp(scene, time_limit=time_limit)


def _die_with_parent(parent: int) -> None:
    """Worker initializer: end this worker as soon as the process that started it is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle (it terminates the pool)
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
    """Exact assignments of ``scenes`` (order kept). Workers are forked: they only run
    numpy/scipy, and unlike spawn, fork works from scripts without a main guard."""
    jobs = [(s, time_limit) for s in scenes]
    bar = dict(total=len(scenes), desc=desc, unit="scene", mininterval=1.0, leave=False)
    if workers <= 1 or len(scenes) < INLINE_BELOW:
        return [_label(j) for j in tqdm(jobs, **bar)]
    chunk = max(1, min(64, len(scenes) // (8 * workers)))
    pool = mp.get_context("fork").Pool(workers, initializer=_die_with_parent, initargs=(os.getpid(),))
    try:
        results = list(tqdm(pool.imap(_label, jobs, chunksize=chunk), **bar))
        pool.close()  # done: let the workers exit by themselves
        return results
    finally:
        pool.terminate()  # on any error (Ctrl-C included) no worker outlives the labelling
        pool.join()


def status_counts(results: list[SolveResult]) -> dict[str, int]:
    names, counts = np.unique([r.status for r in results], return_counts=True)
    return {str(n): int(c) for n, c in zip(names, counts)}
