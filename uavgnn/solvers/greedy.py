"""Greedy baseline (DESIGN §1): targets by value per distance, nearest free UAVs.

A target's score is ``w_j / (travel of its d_j nearest free feasible UAVs)``.
The best target takes those UAVs when the completion pays for the travel;
taking UAVs can only lower other targets' scores, so scores are refreshed
lazily (a max-heap whose popped entry is re-scored and pushed back if it
dropped). Always feasible. The loop is over targets, not UAVs.
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from uavgnn.problem.metrics import IDLE, reward
from uavgnn.problem.scenes import Scene, feasible_pairs
from uavgnn.solvers.result import SolveResult


def solve_greedy(scene: Scene) -> SolveResult:
    start = time.perf_counter()
    pairs = feasible_pairs(scene)
    order = np.lexsort((pairs.dist, pairs.target))  # pairs grouped by target, nearest UAV first
    p_uav, p_dist = pairs.uav[order], pairs.dist[order]
    first = np.searchsorted(pairs.target[order], np.arange(scene.n_target + 1))
    free = np.ones(scene.n_uav, dtype=bool)

    def nearest_free(j: int) -> tuple[np.ndarray, float]:
        cand = slice(first[j], first[j + 1])
        ok = free[p_uav[cand]]
        need = scene.need[j]
        if ok.sum() < need:
            return p_uav[cand][:0], np.inf
        return p_uav[cand][ok][:need], float(p_dist[cand][ok][:need].sum())

    heap = []
    for j in range(scene.n_target):
        _, travel = nearest_free(j)
        if np.isfinite(travel):
            heap.append((-scene.value[j] / max(travel, 1e-12), j))
    heapq.heapify(heap)
    assignment = np.full(scene.n_uav, IDLE, dtype=np.int64)
    while heap:
        neg_score, j = heapq.heappop(heap)
        take, travel = nearest_free(j)
        if not np.isfinite(travel):
            continue
        score = scene.value[j] / max(travel, 1e-12)
        if heap and score < -heap[0][0] - 1e-12:
            heapq.heappush(heap, (-score, j))  # got worse since scored: re-queue
            continue
        if scene.value[j] - scene.lam * travel > 0:
            free[take] = False
            assignment[take] = j
    return SolveResult(
        assignment=assignment,
        objective=reward(scene, assignment),
        status="feasible",
        solver="greedy",
        wall_time=time.perf_counter() - start,
    )
