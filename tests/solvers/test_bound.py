"""The certified bound: the LP relaxation over candidate pairs, priced against every feasible pair. Checked by hand
on a scene worked in full, and against the whole LP (HiGHS's interior point, on the MILP's own formulation with x
and y relaxed) and the MILP's optimum on generated scenes."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import nearest, whole_lp

from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.scenes import FeasiblePairs, Scene, SceneDistribution, feasible_pairs
from uavgnn.solvers import solve_milp
from uavgnn.solvers.bound import certified_bound

RELATIVE = 1e-6  # the bound's margin over the flow's rounded costs


def test_a_pair_the_optimum_needs_left_out_is_priced_back_in(hand_scene) -> None:
    """By hand (conftest.hand_scene): slots worth 2 (target 0, one) and 2.5 (target 1, two), lam 0.5; a UAV earns
    2 (UAV 0 at target 0), 0.5 (UAV 1 at either), 1 (UAV 2 at target 1), 0 or nothing elsewhere. The LP, and J*,
    is 2 + 0.5 + 1 = 3.5. Without the pair (UAV 2, target 1) the candidates reach 2.5 only; pricing finds that
    pair earning 1 above what its UAV gets, adds it, and the bound is 3.5, certified, in a second flow."""
    pairs = feasible_pairs(hand_scene)
    kept = ~((pairs.uav == 2) & (pairs.target == 1))
    bound = certified_bound(hand_scene, FeasiblePairs(pairs.uav[kept], pairs.target[kept], pairs.dist[kept]))
    assert bound.value == pytest.approx(3.5, rel=RELATIVE) and bound.value >= 3.5
    assert bound.certified and bound.rounds == 2 and bound.added == 1 and bound.kind == "certified LP"
    assert solve_milp(hand_scene).objective == pytest.approx(3.5)


@pytest.mark.parametrize("positions", ["uniform", "clustered"])
@pytest.mark.parametrize("n_uav", [16, 64, 256])
def test_the_bound_is_the_whole_lp_and_above_the_optimum(positions, n_uav) -> None:
    """From each UAV's nearest target alone (most pairs the LP uses left out), pricing reaches the whole LP."""
    for scene in generate_scenes(SceneDistribution(positions=positions), n_uav, 2, seed=11):
        bound = certified_bound(scene, nearest(scene, 1))
        whole = whole_lp(scene)
        assert bound.certified and bound.added > 0
        assert whole <= bound.value <= whole + RELATIVE * abs(whole)
        optimum = solve_milp(scene)
        assert optimum.is_optimal and optimum.objective <= bound.value


def test_no_feasible_pair_bounds_at_zero() -> None:
    scene = Scene(
        uav_pos=np.array([[0.0, 0.0]]),
        uav_range=np.array([1.0]),
        target_pos=np.array([[5.0, 5.0]]),
        need=np.array([1]),
        value=np.array([3.0]),
        lam=0.5,
    )
    bound = certified_bound(scene, nearest(scene, 4))
    assert bound.value == 0.0 and bound.certified
