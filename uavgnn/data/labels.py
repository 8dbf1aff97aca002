"""MILP labels for many scenes, solved in worker processes with a progress bar."""

from __future__ import annotations

import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from tqdm import tqdm

from uavgnn.scenes import Scene
from uavgnn.solvers import SolveResult, solve_milp

INLINE_BELOW = 64  # fewer scenes than this are solved in-process: spawning workers costs more


def _label(args: tuple[Scene, float]) -> SolveResult:
    scene, time_limit = args
    return solve_milp(scene, time_limit=time_limit)


def solve_labels(scenes: list[Scene], time_limit: float, workers: int, desc: str = "MILP labels") -> list[SolveResult]:
    """Exact assignments of ``scenes`` (order kept). Workers are forked: they only run
    numpy/scipy, and unlike spawn, fork works from scripts without a main guard."""
    jobs = [(s, time_limit) for s in scenes]
    bar = dict(total=len(scenes), desc=desc, unit="scene", mininterval=1.0, leave=False)
    if workers <= 1 or len(scenes) < INLINE_BELOW:
        return [_label(j) for j in tqdm(jobs, **bar)]
    chunk = max(1, min(64, len(scenes) // (8 * workers)))
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as pool:
        return list(tqdm(pool.map(_label, jobs, chunksize=chunk), **bar))


def status_counts(results: list[SolveResult]) -> dict[str, int]:
    names, counts = np.unique([r.status for r in results], return_counts=True)
    return {str(n): int(c) for n, c in zip(names, counts)}
