"""Repair of an assignment that leaves targets partial, a rule without a model: a target left partial is filled
with the nearest idle UAVs in range when it misses at most ``max_missing`` and completing it pays (its value
exceeds the travel of all its UAVs), otherwise it is dropped (its UAVs go idle: a partial target earns nothing and
costs travel). Afterwards no target is partial. After the model's decode (``eval.repair``) and after the linear
relaxation (``mcf + repair``: the model-reads-the-relaxation pipeline with the model replaced by this rule)."""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

from uavgnn.problem.metrics import IDLE
from uavgnn.problem.scenes import Scene


def repair_assignment(scene: Scene, assignment: np.ndarray, max_missing: int = 1) -> np.ndarray:
    """``assignment`` with every partial target filled from idle UAVs in range or dropped (module docstring)."""
    a = np.asarray(assignment, dtype=np.int64).copy()
    count = np.bincount(a[a >= 0], minlength=scene.n_target)
    partial = np.flatnonzero((count > 0) & (count < scene.need))
    if len(partial) == 0:
        return a
    tree = cKDTree(scene.uav_pos)
    for t in partial[np.argsort(scene.need[partial] - count[partial], kind="stable")]:  # closest to done first
        missing = int(scene.need[t] - count[t])
        mine = np.flatnonzero(a == t)
        if missing <= max_missing:
            near = np.asarray(tree.query_ball_point(scene.target_pos[t], float(scene.uav_range.max())), dtype=np.int64)
            dist = np.linalg.norm(scene.uav_pos[near] - scene.target_pos[t], axis=1)
            ok = (a[near] == IDLE) & (dist <= scene.uav_range[near])
            near, dist = near[ok], dist[ok]
            pick = np.argsort(dist, kind="stable")[:missing]
            travel = np.linalg.norm(scene.uav_pos[mine] - scene.target_pos[t], axis=1).sum() + dist[pick].sum()
            if len(pick) == missing and scene.value[t] > scene.lam * travel:
                a[near[pick]] = t
                continue
        a[mine] = IDLE
    return a
