import itertools

import numpy as np
import pytest

from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.metrics import assignment_metrics
from uavgnn.problem.scenes import Scene, SceneDistribution
from uavgnn.solvers import ProblemTooLarge, solve, solve_lap, solve_milp


def brute_force_optimum(scene: Scene) -> float:
    """Best J over every assignment in (M + 1)^N, written independently of uavgnn.problem.metrics."""
    n, m = scene.n_uav, scene.n_target
    dist = np.linalg.norm(scene.uav_pos[:, None] - scene.target_pos[None], axis=2)
    choices = np.array(list(itertools.product(range(-1, m), repeat=n)))  # (K, N)
    feasible = np.ones(len(choices), dtype=bool)
    travel = np.zeros(len(choices))
    for i in range(n):
        busy = choices[:, i] >= 0
        d = np.where(busy, dist[i, np.maximum(choices[:, i], 0)], 0.0)
        feasible &= ~busy | (d <= scene.uav_range[i])
        travel += d
    counts = np.stack([(choices == j).sum(axis=1) for j in range(m)], axis=1)
    value = ((counts >= scene.need) * scene.value).sum(axis=1)
    return float((value - scene.lam * travel)[feasible].max())


def small_scenes() -> list[Scene]:
    rng = np.random.default_rng(0)
    scenes = []
    for positions in ("uniform", "clustered"):
        for seed in range(100):
            n, m = int(rng.integers(1, 7)), int(rng.integers(1, 5))
            dist = SceneDistribution(positions=positions, target_ratio=(m - 0.5) / n, lam=float(rng.uniform(0.05, 0.5)))
            scenes.append(generate_scenes(dist, n, 1, seed)[0])
    return scenes


def test_milp_equals_brute_force_on_200_small_scenes() -> None:
    scenes = small_scenes()
    assert len(scenes) == 200 and max(s.n_uav for s in scenes) <= 6 and max(s.n_target for s in scenes) <= 4
    for scene in scenes:
        result = solve_milp(scene)
        assert result.status == "optimal"
        assert result.objective == pytest.approx(brute_force_optimum(scene), abs=1e-7)


def test_baselines_feasible_and_never_beat_milp() -> None:
    scenes = (
        small_scenes()[::4]
        + generate_scenes(SceneDistribution(), 64, 5, seed=1)
        + generate_scenes(SceneDistribution(positions="clustered"), 64, 5, seed=2)
    )
    for scene in scenes:
        best = solve(scene, "milp").objective
        for name in ("greedy", "lap"):
            result = solve(scene, name)
            metrics = assignment_metrics([scene], [result.assignment])
            assert metrics["infeasible"][0] == 0, name
            assert result.objective <= best + 1e-9, name
            # all-or-nothing: a feasible baseline never leaves a target partial
            count = np.bincount(result.assignment[result.assignment >= 0], minlength=scene.n_target)
            assert np.all((count == 0) | (count == scene.need)), name


def test_milp_labels_never_over_assign() -> None:
    for scene in generate_scenes(SceneDistribution(), 32, 10, seed=5):
        a = solve_milp(scene).assignment
        count = np.bincount(a[a >= 0], minlength=scene.n_target)
        assert np.all((count == 0) | (count == scene.need))


def test_time_limited_milp_is_not_called_optimal() -> None:
    scene = generate_scenes(SceneDistribution(), 1024, 1, seed=0)[0]
    result = solve_milp(scene, time_limit=0.05)
    assert result.status in ("time_limit", "no_solution")
    assert not result.is_optimal
    if result.status == "time_limit":
        assert result.bound is not None and result.bound >= result.objective - 1e-6


def test_lap_declines_above_its_size_with_a_message() -> None:
    scene = generate_scenes(SceneDistribution(), 64, 1, seed=0)[0]
    with pytest.raises(ProblemTooLarge, match="exceeds max_cells=100"):
        solve_lap(scene, max_cells=100)


def test_unknown_solver_is_named(hand_scene) -> None:
    with pytest.raises(ValueError, match="unknown solver 'cplex'"):
        solve(hand_scene, "cplex")


def test_repair_fills_or_drops_partial_targets_by_hand(hand_scene) -> None:
    import dataclasses

    from uavgnn.problem.metrics import reward
    from uavgnn.solvers.repair import repair_assignment

    partial = np.array([-1, 1, -1, -1])  # target 1 (need 2) has only UAV 1, 4 away: J = -0.5 * 4
    # idle UAVs in range of target 1: UAV 2 (3 away) and UAV 0 (5 away, range 5); UAV 3 is out of range
    filled = repair_assignment(hand_scene, partial)
    assert filled.tolist() == [-1, 1, 1, -1]
    assert reward(hand_scene, filled) == pytest.approx(5 - 0.5 * (4 + 3)) and reward(hand_scene, partial) == -2
    costly = dataclasses.replace(hand_scene, lam=1.0)  # travel 7 > value 5: completing does not pay
    assert repair_assignment(costly, partial).tolist() == [-1, -1, -1, -1]
    assert repair_assignment(hand_scene, partial, max_missing=0).tolist() == [-1, -1, -1, -1]
    done = np.array([0, 1, 1, -1])
    assert repair_assignment(hand_scene, done).tolist() == done.tolist()  # nothing partial: unchanged
