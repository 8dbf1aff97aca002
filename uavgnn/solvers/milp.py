"""Exact solver: the DESIGN §1 MILP, solved by HiGHS through ``scipy.optimize.milp``.

Variables: binary ``x_p`` for each *feasible* (UAV, target) pair p and binary
``y_j`` per target. Constraints (sparse CSR, one row per UAV and per target):

- each UAV takes at most one target: ``sum_{p in i} x_p <= 1``;
- target j gets exactly ``d_j`` UAVs if completed, none otherwise:
  ``sum_{p in j} x_p - d_j y_j = 0``.

The equality is the DESIGN's ``>=`` tightened: with ``lam >= 0`` an optimum
never over-assigns or partially assigns (both only add travel), so the
optimal value is the same, the LP relaxation is tighter, and the labels are
clean by construction.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp

from uavgnn.problem.metrics import IDLE, reward
from uavgnn.problem.scenes import FeasiblePairs, Scene, feasible_pairs
from uavgnn.solvers.result import SolveResult

_STATUS = {0: "optimal", 1: "time_limit", 2: "infeasible", 3: "unbounded", 4: "error"}


def solve_milp(
    scene: Scene, time_limit: float = 60.0, mip_rel_gap: float = 1e-6, pairs: FeasiblePairs | None = None
) -> SolveResult:
    """Maximise J over feasible assignments (over ``pairs`` only when given: a reduced problem). A time-limited
    answer is labelled ``time_limit`` with its MIP gap and dual bound, never passed off as optimal."""
    start = time.perf_counter()
    pairs = feasible_pairs(scene) if pairs is None else pairs
    n_pairs, n_uav, n_target = len(pairs.uav), scene.n_uav, scene.n_target
    cost = np.concatenate([scene.lam * pairs.dist, -scene.value])  # milp minimises
    pair_idx = np.arange(n_pairs)
    uav_rows = sp.csr_matrix((np.ones(n_pairs), (pairs.uav, pair_idx)), shape=(n_uav, n_pairs + n_target))
    target_rows = sp.csr_matrix(
        (
            np.concatenate([np.ones(n_pairs), -scene.need.astype(np.float64)]),
            (
                np.concatenate([pairs.target, np.arange(n_target)]),
                np.concatenate([pair_idx, n_pairs + np.arange(n_target)]),
            ),
        ),
        shape=(n_target, n_pairs + n_target),
    )
    constraints = [LinearConstraint(uav_rows, -np.inf, 1.0), LinearConstraint(target_rows, 0.0, 0.0)]
    res = milp(
        cost,
        constraints=constraints,
        integrality=np.ones(n_pairs + n_target),
        bounds=Bounds(0.0, 1.0),
        options={"time_limit": float(time_limit), "mip_rel_gap": mip_rel_gap},
    )
    assignment = np.full(n_uav, IDLE, dtype=np.int64)
    status = _STATUS.get(res.status, "error")
    if res.x is not None:
        chosen = res.x[:n_pairs] > 0.5
        assignment[pairs.uav[chosen]] = pairs.target[chosen]
    elif status == "time_limit":
        status = "no_solution"  # stopped before any incumbent: all idle is feasible but says nothing
    bound = getattr(res, "mip_dual_bound", None)
    return SolveResult(
        assignment=assignment,
        objective=reward(scene, assignment),
        status=status,
        solver="milp",
        wall_time=time.perf_counter() - start,
        bound=None if bound is None or not np.isfinite(bound) else float(-bound),
        mip_gap=None if getattr(res, "mip_gap", None) is None else float(res.mip_gap),
    )
