"""Linear-relaxation baseline: an assignment problem over target slots.

Target j is expanded into ``d_j`` slots worth ``w_j / d_j`` each (the linear
relaxation of all-or-nothing completion); UAV i in slot s of j costs
``lam * dist_ij - w_j / d_j``. Infeasible or unprofitable pairs cost 0, which
means idle. ``scipy.optimize.linear_sum_assignment`` solves the dense problem;
targets left partial are then dropped (their UAVs go idle), so the result is
feasible. scipy's sparse matching (``min_weight_full_bipartite_matching``)
stalls on geometric kNN graphs from about 2,000 nodes, hence the dense
solver and the size cap ``MAX_CELLS``.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.optimize import linear_sum_assignment

from uavgnn.infrastructure.errors import ProblemTooLarge
from uavgnn.problem.metrics import IDLE, reward
from uavgnn.problem.scenes import Scene, feasible_pairs
from uavgnn.solvers.result import SolveResult

MAX_CELLS = 64_000_000  # N x sum(d_j) cells of the dense cost matrix (~512 MB of float64)


def solve_lap(scene: Scene, max_cells: int = MAX_CELLS) -> SolveResult:
    start = time.perf_counter()
    n_slots = int(scene.need.sum())
    if scene.n_uav * n_slots > max_cells:
        raise ProblemTooLarge(
            f"lap: {scene.n_uav} UAVs x {n_slots} target slots = {scene.n_uav * n_slots:,} cells exceeds "
            f"max_cells={max_cells:,}; use solver=greedy or solver=milp at this size"
        )
    pairs = feasible_pairs(scene)
    slot_target = np.repeat(np.arange(scene.n_target), scene.need)
    slot_first = np.concatenate([[0], np.cumsum(scene.need)[:-1]])
    # every pair (i, j) fills all d_j slots of j with the same cost
    per_pair_slots = scene.need[pairs.target]
    rows = np.repeat(pairs.uav, per_pair_slots)
    cols = np.repeat(slot_first[pairs.target], per_pair_slots) + (
        np.arange(per_pair_slots.sum()) - np.repeat(np.cumsum(per_pair_slots) - per_pair_slots, per_pair_slots)
    )
    pair_cost = scene.lam * pairs.dist - scene.value[pairs.target] / scene.need[pairs.target]
    cost = np.zeros((scene.n_uav, n_slots))
    cost[rows, cols] = np.minimum(np.repeat(pair_cost, per_pair_slots), 0.0)
    row, col = linear_sum_assignment(cost)
    take = cost[row, col] < 0
    assignment = np.full(scene.n_uav, IDLE, dtype=np.int64)
    assignment[row[take]] = slot_target[col[take]]
    count = np.bincount(assignment[assignment != IDLE], minlength=scene.n_target)
    partial = (assignment != IDLE) & (count[np.maximum(assignment, 0)] < scene.need[np.maximum(assignment, 0)])
    assignment[partial] = IDLE
    return SolveResult(
        assignment=assignment,
        objective=reward(scene, assignment),
        status="feasible",
        solver="lap",
        wall_time=time.perf_counter() - start,
    )
