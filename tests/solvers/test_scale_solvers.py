"""Solvers for large scenes: the min-cost-flow relaxation (mcf) and the model-guided MILP (guided)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linprog
from scipy.sparse import csr_matrix

from uavgnn.inference.guided import solve_guided
from uavgnn.models import TransformerGNN
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.graphs import GraphSettings
from uavgnn.problem.metrics import IDLE, assignment_metrics
from uavgnn.problem.scenes import Scene, SceneDistribution, feasible_pairs
from uavgnn.solvers import solve_milp
from uavgnn.solvers.min_cost_flow import relaxed_assignment, solve_mcf
from uavgnn.solvers.pruned import pairs_of, top_candidates


def slot_profit(scene: Scene, assignment: np.ndarray) -> float:
    """The relaxation's objective of an assignment: each assigned UAV earns w_j / d_j - lam * dist."""
    uav = np.flatnonzero(assignment != IDLE)
    target = assignment[uav]
    dist = np.linalg.norm(scene.uav_pos[uav] - scene.target_pos[target], axis=1)
    return float((scene.value[target] / scene.need[target] - scene.lam * dist).sum())


def lp_optimum(scene: Scene) -> float:
    """The transportation LP solved independently with HiGHS: max sum profit x, each UAV <= 1, target j <= d_j."""
    pairs = feasible_pairs(scene)
    profit = scene.value[pairs.target] / scene.need[pairs.target] - scene.lam * pairs.dist
    columns = np.arange(len(pairs.uav))
    rows = csr_matrix(
        (
            np.ones(2 * len(columns)),
            (np.concatenate([pairs.uav, scene.n_uav + pairs.target]), np.concatenate([columns, columns])),
        ),
        shape=(scene.n_uav + scene.n_target, len(columns)),
    )
    res = linprog(
        -profit, A_ub=rows, b_ub=np.concatenate([np.ones(scene.n_uav), scene.need]), bounds=(0, 1), method="highs"
    )
    return -res.fun


@pytest.mark.parametrize("positions", ["uniform", "clustered"])
def test_min_cost_flow_solves_the_linear_relaxation_exactly(positions) -> None:
    for scene in generate_scenes(SceneDistribution(positions=positions), 60, 4, seed=11):
        relaxed = relaxed_assignment(scene, k=10**6)  # every feasible pair an arc: the full relaxation
        assert slot_profit(scene, relaxed) == pytest.approx(lp_optimum(scene), abs=60 * 1e-6)
        assert np.all(np.bincount(relaxed[relaxed >= 0], minlength=scene.n_target) <= scene.need)
        result = solve_mcf(scene)
        metrics = assignment_metrics([scene], [result.assignment])
        count = np.bincount(result.assignment[result.assignment >= 0], minlength=scene.n_target)
        assert metrics["infeasible"][0] == 0 and np.all((count == 0) | (count == scene.need))  # none partial
        assert result.objective <= solve_milp(scene).objective + 1e-9


def test_min_cost_flow_uses_only_each_uavs_k_nearest_targets() -> None:
    scene = generate_scenes(SceneDistribution(), 40, 1, seed=2)[0]
    pairs = feasible_pairs(scene)
    first = np.searchsorted(pairs.uav, np.arange(scene.n_uav))
    nearest = {(int(u), int(t)) for u, t in zip(pairs.uav[first], pairs.target[first]) if len(pairs.uav)}
    relaxed = relaxed_assignment(scene, k=1)
    assert all((i, int(t)) in nearest for i, t in enumerate(relaxed) if t != IDLE)


def test_kept_pairs_are_each_uavs_most_likely_targets_by_hand() -> None:
    scene = Scene(
        uav_pos=np.array([[0.0, 0.0], [4.0, 0.0]]),
        uav_range=np.array([9.0, 9.0]),
        target_pos=np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]]),
        need=np.ones(3, np.int64),
        value=np.ones(3),
        lam=0.1,
    )
    uav, target = np.array([0, 0, 0, 1, 1]), np.array([0, 1, 2, 2, 0])
    logp = np.log(np.array([0.1, 0.6, 0.3, 0.2, 0.7]))
    kept = top_candidates(uav, target, logp, keep=1)
    assert list(zip(*(a.tolist() for a in kept))) == [(0, 1), (1, 0)]  # the most likely target of each UAV
    # with the relaxation's (0, 0) and a duplicate (1, 0): distinct pairs, by UAV then distance
    pairs = pairs_of(scene, np.concatenate([kept[0], [0, 1]]), np.concatenate([kept[1], [0, 0]]))
    assert list(zip(pairs.uav.tolist(), pairs.target.tolist())) == [(0, 0), (0, 1), (1, 0)]
    np.testing.assert_allclose(pairs.dist, [1.0, 2.0, 3.0])


@pytest.mark.parametrize("relaxation", [False, True])  # True: the relaxation's pairs are those the model read
def test_guided_milp_is_the_full_milp_when_nothing_is_pruned_and_never_better(relaxation) -> None:
    torch.manual_seed(0)
    model = TransformerGNN(hidden=32, heads=2, layers=2, relaxation=relaxation)
    for scene in generate_scenes(SceneDistribution(), 16, 3, seed=4):
        full = solve_milp(scene)
        everything, timing = solve_guided(model, scene, GraphSettings(), keep=16)
        assert everything.objective == pytest.approx(full.objective) and everything.status == "kept_pairs_optimal"
        assert timing["pairs"] == len(feasible_pairs(scene).uav)  # 8 targets: every feasible pair is a candidate
        pruned, timing = solve_guided(model, scene, GraphSettings(), keep=1)
        assert timing["pairs"] <= 2 * scene.n_uav and pruned.objective <= full.objective + 1e-9
        assert pruned.objective >= solve_mcf(scene).objective - 1e-9  # the relaxation's pairs are always kept
        assert pruned.bound is None  # a bound of the reduced problem says nothing about the full one
