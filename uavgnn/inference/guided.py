"""Model-guided exact solving (``solver=guided``): the model prunes, HiGHS solves what is left to optimality.

The exact MILP over all feasible pairs grows fast (326 s for one scene of 4,096
UAVs on 2 cores, BENCHMARKS.md). The trained policy already ranks each UAV's
candidates; the reduced MILP keeps each UAV's ``keep`` most likely targets
(idling is always allowed) and, as a trust region, the pair the min-cost-flow
relaxation (``mcf``) gives it. With the relaxation's pairs in, the reduced
problem contains ``mcf``'s assignment, so ``guided`` is never worse than
``mcf``; pruning on the model alone cost 0.4-4.8% of the optimum at 1,024 UAVs
and made HiGHS slower, not faster (BENCHMARKS.md). The optimum is exact *on the
reduced problem*: when the full optimum uses only kept pairs it is the full
optimum; otherwise the gap is what pruning cost, reported against the full MILP
by the benchmark.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import torch

from uavgnn.inference.scene import score_scene
from uavgnn.models import TransformerGNN
from uavgnn.problem.graphs import GraphSettings
from uavgnn.problem.scenes import FeasiblePairs, Scene, rank_in_runs
from uavgnn.solvers.milp import solve_milp
from uavgnn.solvers.min_cost_flow import relaxed_assignment
from uavgnn.solvers.result import SolveResult


def top_candidates(uav: np.ndarray, target: np.ndarray, logp: np.ndarray, keep: int) -> tuple[np.ndarray, np.ndarray]:
    """Each UAV's ``keep`` most likely (UAV, target) candidates."""
    order = np.lexsort((-logp, uav))
    uav, target = uav[order], target[order]
    chosen = rank_in_runs(uav) < keep
    return uav[chosen], target[chosen]


def pairs_of(scene: Scene, uav: np.ndarray, target: np.ndarray) -> FeasiblePairs:
    """The distinct (UAV, target) pairs given, with distances, sorted by UAV then distance."""
    key = np.unique(uav.astype(np.int64) * scene.n_target + target)
    uav, target = key // scene.n_target, key % scene.n_target
    dist = np.linalg.norm(scene.uav_pos[uav] - scene.target_pos[target], axis=1)
    order = np.lexsort((target, dist, uav))
    return FeasiblePairs(uav[order], target[order], dist[order])


def solve_guided(model: TransformerGNN, scene: Scene, graph: GraphSettings, keep: int = 2,
                 time_limit: float = 60.0, device: torch.device | str = "cpu",
                 amp_dtype: torch.dtype | None = None) -> tuple[SolveResult, dict[str, float]]:
    """The MILP restricted to each UAV's ``keep`` most likely targets and the relaxation's pair;
    timing {model_s, relaxation_s, milp_s, pairs}."""
    if keep < 1:
        raise ValueError(f"solve.guided_keep={keep} must be >= 1")
    start = time.perf_counter()
    uav, target = top_candidates(*score_scene(model, scene, graph, device, amp_dtype).candidates(), keep)
    scored = time.perf_counter()
    relaxed = relaxed_assignment(scene, graph.k_max)
    taken = np.flatnonzero(relaxed >= 0)
    pairs = pairs_of(scene, np.concatenate([uav, taken]), np.concatenate([target, relaxed[taken]]))
    anchored = time.perf_counter()
    reduced = solve_milp(scene, time_limit=time_limit, pairs=pairs)
    done = time.perf_counter()
    # optimal on the kept pairs only: neither that status nor its dual bound is a claim about the full problem
    status = "kept_pairs_optimal" if reduced.is_optimal else reduced.status
    result = replace(reduced, solver="guided", status=status, wall_time=done - start, bound=None, mip_gap=None)
    return result, {"model_s": scored - start, "relaxation_s": anchored - scored, "milp_s": done - anchored,
                    "pairs": float(len(pairs.uav))}
