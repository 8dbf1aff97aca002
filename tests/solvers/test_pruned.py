"""The controls as solvers. The MILP pruned by a rule without a model (nearest, value, the linear
relaxation's reduced cost) keeps what each rule says, is the full MILP when nothing is pruned and never worse than
the relaxation's rounding; the reduced costs are the LP's, checked against HiGHS's own primal and by hand."""

from __future__ import annotations

import numpy as np
import pytest
from test_scale_solvers import lp_optimum

from uavgnn.config.validation import ITEM_CHOICES
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.scenes import Scene, SceneDistribution, feasible_pairs
from uavgnn.solvers import solve_mcf, solve_milp
from uavgnn.solvers.min_cost_flow import relaxed_assignment
from uavgnn.solvers.pruned import (
    PRUNERS,
    candidate_pairs,
    profit,
    pruner_scores,
    reduced_costs,
    solve_with_pruner,
    top_candidates,
)


def hand_scene() -> Scene:
    """UAV 0 at the origin; target 0 one unit away, worth 1 (need 1); target 1 two units away, worth 3 (need 1);
    UAV 1 two units from target 1 only. Nearest: UAV 0 -> 0. Value per slot: UAV 0 -> 1. The LP gives target 1 to
    one UAV: both UAVs cannot have it."""
    return Scene(
        uav_pos=np.array([[0.0, 0.0], [4.0, 0.0]]),
        uav_range=np.array([2.5, 2.5]),
        target_pos=np.array([[-1.0, 0.0], [2.0, 0.0]]),
        need=np.array([1, 1]),
        value=np.array([1.0, 3.0]),
        lam=0.1,
    )


def test_each_rule_keeps_what_it_says_by_hand() -> None:
    scene = hand_scene()
    pairs = candidate_pairs(scene)
    assert list(zip(pairs.uav.tolist(), pairs.target.tolist())) == [(0, 0), (0, 1), (1, 1)]
    kept = {
        pruner: top_candidates(pairs.uav, pairs.target, pruner_scores(scene, pruner, pairs), keep=1)
        for pruner in PRUNERS
    }
    assert kept["nearest"][1].tolist() == [0, 1]  # UAV 0's nearest is target 0
    assert kept["value"][1].tolist() == [1, 1]  # 3 - 0.2 beats 1 - 0.1
    # the LP: UAV 0 on target 1 (2.8) with UAV 1 idle (target 0 is out of its range), or UAV 1 on 1 (2.8) and UAV 0
    # on 0 (0.9): 3.7 > 2.8, so the LP takes (0, 0) and (1, 1), reduced cost 0 there; (0, 1) is >= 0 (0.9 or, the
    # duals being degenerate here, less), and a tie goes to the nearer pair
    reduced = reduced_costs(scene, pairs)
    assert abs(reduced[0]) < 1e-9 and abs(reduced[2]) < 1e-9 and -1e-9 <= reduced[1] <= 0.9 + 1e-9
    assert kept["relaxation"][1].tolist() == [0, 1]


@pytest.mark.parametrize("positions", ["uniform", "clustered"])
def test_reduced_costs_are_the_lps(positions) -> None:
    """Never negative (dual feasibility) and zero on the pairs of an optimal LP solution (the min-cost flow's, whose
    value ``lp_optimum`` computes independently): complementary slackness."""
    for scene in generate_scenes(SceneDistribution(positions=positions), 40, 3, seed=8):
        pairs = candidate_pairs(scene, k=10**6)
        reduced = reduced_costs(scene, pairs)
        relaxed = relaxed_assignment(scene, k=10**6)
        on_lp = relaxed[pairs.uav] == pairs.target
        assert profit(scene, pairs)[on_lp].sum() == pytest.approx(lp_optimum(scene), abs=1e-6)
        assert reduced.min() >= 0 and np.abs(reduced[on_lp]).max() < 1e-7
        assert (reduced > 1e-6).sum() > len(reduced) // 2  # and most pairs cost something to take


def test_a_pruned_milp_is_the_full_milp_unpruned_and_never_worse_than_the_relaxation() -> None:
    for scene in generate_scenes(SceneDistribution(), 16, 3, seed=4):
        full = solve_milp(scene)
        for pruner in PRUNERS:
            everything, timing = solve_with_pruner(scene, pruner, keep=16)
            assert everything.objective == pytest.approx(full.objective) and everything.status == "kept_pairs_optimal"
            assert timing["pairs"] == len(feasible_pairs(scene).uav)  # 8 targets: every feasible pair kept
            pruned, timing = solve_with_pruner(scene, pruner, keep=1)
            assert timing["pairs"] <= 2 * scene.n_uav and pruned.objective <= full.objective + 1e-9
            assert pruned.objective >= solve_mcf(scene).objective - 1e-9  # the relaxation's pairs are kept
            assert pruned.wall_time >= timing["score_s"] + timing["milp_s"] and pruned.bound is None


def test_the_config_offers_every_pruner() -> None:
    assert ITEM_CHOICES["eval.pruners"] == ("model", *PRUNERS)


def test_mcf_repaired_is_feasible_and_no_worse_than_mcf() -> None:
    for scene in generate_scenes(SceneDistribution(positions="clustered"), 60, 4, seed=9):
        plain, repaired = solve_mcf(scene), solve_mcf(scene, repair=True)
        count = np.bincount(repaired.assignment[repaired.assignment >= 0], minlength=scene.n_target)
        assert np.all((count == 0) | (count == scene.need)) and repaired.solver == "mcf + repair"
        assert plain.objective - 1e-9 <= repaired.objective <= solve_milp(scene).objective + 1e-9
