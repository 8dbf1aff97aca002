"""The MILP on a pruned set of pairs: each UAV's ``keep`` best candidates by a pruner's score, plus the pair the
linear relaxation (``mcf``) gives it; HiGHS solves that reduced problem to optimality (or to its time limit).

The full MILP grows fast with the scene; a pruner decides which pairs it may use. The pruners without a model are
the controls a learned one has to beat (predict-and-search is judged against heuristic and LP-based fixing at
equal time), each ranking the same candidates (each UAV's ``k`` nearest feasible targets):

- ``nearest``: the nearest targets first;
- ``value``: the pair's profit per slot first, ``value / need - lam * dist``;
- ``relaxation``: the linear relaxation's reduced cost first (``u_i + v_j - profit_ij`` from HiGHS's duals of the
  transportation LP over the candidates: 0 on the pairs the LP takes and on those it prices as good).

The model's pruner (``inference.guided``) hands its log-probabilities to the same ``solve_pruned``. With the
relaxation's pairs in, the reduced problem holds ``mcf``'s assignment, so a pruned MILP is never worse than
``mcf``. Its optimum is exact on the kept pairs only (``kept_pairs_optimal``): what pruning cost is measured
against the full MILP by ``mode=eval`` and the benchmarks.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from uavgnn.problem.scenes import FeasiblePairs, Scene, feasible_pairs, rank_in_runs
from uavgnn.solvers.milp import solve_milp
from uavgnn.solvers.min_cost_flow import relaxed_assignment
from uavgnn.solvers.result import SolveResult

PRUNERS = ("nearest", "value", "relaxation")  # the model's: ``inference.guided``
CANDIDATES = 32  # each UAV's nearest feasible targets every pruner ranks (the shipped model's candidate budget)


def candidate_pairs(scene: Scene, k: int = CANDIDATES) -> FeasiblePairs:
    """Each UAV's ``k`` nearest feasible targets, sorted by UAV then distance."""
    pairs = feasible_pairs(scene)
    near = rank_in_runs(pairs.uav) < k
    return FeasiblePairs(pairs.uav[near], pairs.target[near], pairs.dist[near])


def profit(scene: Scene, pairs: FeasiblePairs) -> np.ndarray:
    """What a UAV earns in the relaxation on each pair: its target's value per slot minus its travel cost."""
    return scene.value[pairs.target] / scene.need[pairs.target] - scene.lam * pairs.dist


def reduced_costs(scene: Scene, pairs: FeasiblePairs) -> np.ndarray:
    """The transportation LP's reduced cost of each pair (>= 0; 0 where the LP takes it): max sum profit x with
    each UAV at most one pair and target j at most d_j, solved by HiGHS's dual simplex, duals u (UAVs), v (targets):
    ``u_i + v_j - profit_ij``."""
    gain, columns = profit(scene, pairs), np.arange(len(pairs.uav))
    rows = sp.csr_matrix(
        (
            np.ones(2 * len(columns)),
            (np.concatenate([pairs.uav, scene.n_uav + pairs.target]), np.concatenate([columns, columns])),
        ),
        shape=(scene.n_uav + scene.n_target, len(columns)),
    )
    res = linprog(
        -gain, A_ub=rows, b_ub=np.concatenate([np.ones(scene.n_uav), scene.need]), bounds=(0, None), method="highs-ds"
    )
    if res.status != 0:
        raise RuntimeError(f"relaxation pruner: HiGHS ended the LP with status {res.status} ({res.message})")
    dual = -res.ineqlin.marginals  # of the maximisation: >= 0
    return np.maximum(dual[pairs.uav] + dual[scene.n_uav + pairs.target] - gain, 0.0)


def pruner_scores(scene: Scene, pruner: str, pairs: FeasiblePairs) -> np.ndarray:
    """Each candidate pair's score under ``pruner`` (higher is kept first)."""
    if pruner == "nearest":
        return -pairs.dist
    if pruner == "value":
        return profit(scene, pairs)
    if pruner == "relaxation":
        return -reduced_costs(scene, pairs)
    raise ValueError(f"pruner: unknown pruner {pruner!r} (expected one of model, {', '.join(PRUNERS)})")


def top_candidates(uav: np.ndarray, target: np.ndarray, score: np.ndarray, keep: int) -> tuple[np.ndarray, np.ndarray]:
    """Each UAV's ``keep`` best-scored (UAV, target) candidates (ties: the first given)."""
    order = np.lexsort((-score, uav))
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


def solve_pruned(
    scene: Scene,
    uav: np.ndarray,
    target: np.ndarray,
    score: np.ndarray,
    keep: int,
    time_limit: float = 60.0,
    k: int = CANDIDATES,
    name: str = "pruned",
    relaxed: np.ndarray | None = None,
) -> tuple[SolveResult, dict[str, float]]:
    """The MILP on each UAV's ``keep`` best-scored candidates and the relaxation's pair (over each UAV's ``k``
    nearest feasible targets; ``relaxed``: its assignment, when the caller has it already); timing {relaxation_s,
    milp_s, pairs} (the scores' own time is the caller's)."""
    if keep < 1:
        raise ValueError(f"keep={keep} must be >= 1 (each UAV's candidates the pruned MILP may use)")
    start = time.perf_counter()
    kept_uav, kept_target = top_candidates(uav, target, score, keep)
    relaxed = relaxed_assignment(scene, k) if relaxed is None else relaxed
    taken = np.flatnonzero(relaxed >= 0)
    pairs = pairs_of(scene, np.concatenate([kept_uav, taken]), np.concatenate([kept_target, relaxed[taken]]))
    anchored = time.perf_counter()
    reduced = solve_milp(scene, time_limit=time_limit, pairs=pairs)
    # optimal on the kept pairs only: neither that status nor its dual bound is a claim about the full problem
    status = "kept_pairs_optimal" if reduced.is_optimal else reduced.status
    result = replace(reduced, solver=name, status=status, bound=None, mip_gap=None)
    return result, {"relaxation_s": anchored - start, "milp_s": reduced.wall_time, "pairs": float(len(pairs.uav))}


def solve_with_pruner(
    scene: Scene, pruner: str, keep: int, time_limit: float = 60.0, k: int = CANDIDATES
) -> tuple[SolveResult, dict[str, float]]:
    """``solve_pruned`` with a pruner of ``PRUNERS``: the result (its ``wall_time`` the whole, scoring included)
    and the time split {score_s, relaxation_s, milp_s, pairs}."""
    start = time.perf_counter()
    pairs = candidate_pairs(scene, k)
    score = pruner_scores(scene, pruner, pairs)
    scored = time.perf_counter()
    result, timing = solve_pruned(scene, pairs.uav, pairs.target, score, keep, time_limit, k, f"{pruner}-pruned milp")
    return replace(result, wall_time=time.perf_counter() - start), {"score_s": scored - start, **timing}
