"""Metrics on the hand-worked scene of conftest.hand_scene; expected numbers computed by hand."""

import numpy as np
import pytest

from uavgnn.problem.metrics import assignment_metrics


def one(scene, assignment, optimum=None) -> dict:
    out = assignment_metrics([scene], [np.array(assignment)], None if optimum is None else [optimum])
    return {k: float(v[0]) for k, v in out.items()}


def test_both_targets_completed(hand_scene) -> None:
    # UAV0 -> T0 (dist 0), UAV1 -> T1 (dist 4), UAV2 -> T1 (dist 3): J = 2 + 5 - 0.5 * 7 = 3.5
    m = one(hand_scene, [0, 1, 1, -1], optimum=3.5)
    assert m["reward"] == pytest.approx(3.5)
    assert m["per_agent_reward"] == pytest.approx(3.5 / 4)
    assert m["completion_rate"] == 1.0
    assert m["congestion"] == 0.0
    assert m["completion_score"] == 1.0
    assert m["efficiency"] == pytest.approx(2 / 7)
    assert m["optimality_gap"] == pytest.approx(0.0)
    assert m["infeasible"] == 0


def test_over_assigned_target_congests(hand_scene) -> None:
    # UAV0, UAV1 -> T0 (need 1: one extra), UAV2 -> T1 alone (need 2: not completed)
    # J = 2 - 0.5 * (0 + 3 + 3) = -1; congestion = 1 extra / 3 busy
    m = one(hand_scene, [0, 0, 1, -1], optimum=3.5)
    assert m["reward"] == pytest.approx(-1.0)
    assert m["completion_rate"] == 0.5
    assert m["congestion"] == pytest.approx(1 / 3)
    assert m["completion_score"] == pytest.approx(0.5 * (1 - 1 / 3))
    assert m["efficiency"] == pytest.approx(1 / 6)
    assert m["optimality_gap"] == pytest.approx(4.5 / 3.5)


def test_zero_distance_gives_zero_efficiency(hand_scene) -> None:
    m = one(hand_scene, [0, -1, -1, -1])
    assert m["reward"] == pytest.approx(2.0)
    assert m["completion_rate"] == 0.5
    assert m["efficiency"] == 0.0
    assert m["congestion"] == 0.0
    assert "optimality_gap" not in m


def test_all_idle(hand_scene) -> None:
    m = one(hand_scene, [-1, -1, -1, -1], optimum=3.5)
    assert m["reward"] == 0.0 and m["completion_rate"] == 0.0 and m["congestion"] == 0.0
    assert m["efficiency"] == 0.0 and m["optimality_gap"] == pytest.approx(1.0)


def test_out_of_range_uav_is_counted_infeasible(hand_scene) -> None:
    # UAV3 at (10,10) has range 1 but T1 (3,4) is sqrt(85) away
    assert one(hand_scene, [0, 1, 1, 1])["infeasible"] == 1


def test_batch_equals_one_by_one(hand_scene) -> None:
    assignments = [np.array(a) for a in ([0, 1, 1, -1], [0, 0, 1, -1], [-1, -1, -1, -1])]
    batch = assignment_metrics([hand_scene] * 3, assignments, [3.5] * 3)
    for s, a in enumerate(assignments):
        for key, value in one(hand_scene, a, 3.5).items():
            assert batch[key][s] == pytest.approx(value)


def test_bad_assignment_is_named(hand_scene) -> None:
    with pytest.raises(ValueError, match="shape"):
        assignment_metrics([hand_scene], [np.array([0, 1])])
    with pytest.raises(ValueError, match="out of"):
        assignment_metrics([hand_scene], [np.array([0, 1, 2, -1])])
