import math

import numpy as np
import pytest

from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.scenes import Scene, SceneDistribution, feasible_pairs


@pytest.mark.parametrize("positions", ["uniform", "clustered"])
def test_generator_is_seeded_and_within_bounds(positions: str) -> None:
    dist = SceneDistribution(positions=positions)
    a = generate_scenes(dist, 16, 50, seed=3)
    b = generate_scenes(dist, 16, 50, seed=3)
    c = generate_scenes(dist, 16, 50, seed=4)
    assert all(np.array_equal(x.uav_pos, y.uav_pos) and np.array_equal(x.need, y.need) for x, y in zip(a, b))
    assert not np.array_equal(a[0].uav_pos, c[0].uav_pos)
    side = math.sqrt((16 + 8) / dist.density)
    for s in a:
        assert s.n_uav == 16 and s.n_target == 8
        assert s.uav_pos.min() >= 0 and s.uav_pos.max() <= side
        assert s.target_pos.min() >= 0 and s.target_pos.max() <= side
        assert dist.need_min <= s.need.min() and s.need.max() <= dist.need_max
        assert np.all((s.uav_range >= dist.range_min) & (s.uav_range <= dist.range_max))
        assert np.all(s.value >= s.need * dist.value_min) and np.all(s.value <= s.need * dist.value_max)


def test_unknown_distribution_is_named() -> None:
    with pytest.raises(ValueError, match="task.positions: unknown distribution 'ring'"):
        generate_scenes(SceneDistribution(positions="ring"), 4, 1, 0)


@pytest.mark.parametrize("first_k", [32, 1])  # 1: most UAVs ask again (k doubles until their list is complete)
def test_feasible_pairs_match_brute_force(first_k: int) -> None:
    tied = Scene(
        uav_pos=np.array([[0.0, 0.0], [5.0, 5.0]]),
        uav_range=np.array([2.0, 0.5]),
        target_pos=np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [9.0, 9.0]]),
        need=np.ones(5, np.int64),
        value=np.ones(5),
        lam=0.1,
    )  # four targets at distance 1 from UAV 0
    for scene in generate_scenes(SceneDistribution(positions="clustered"), 40, 5, seed=9) + [tied]:
        dist = np.linalg.norm(scene.uav_pos[:, None] - scene.target_pos[None], axis=2)
        pairs = feasible_pairs(scene, first_k)
        # sorted by UAV, then distance, then target: exactly the brute-force order
        uav, target = np.nonzero(dist <= scene.uav_range[:, None])
        order = np.lexsort((target, dist[uav, target], uav))
        np.testing.assert_array_equal(pairs.uav, uav[order])
        np.testing.assert_array_equal(pairs.target, target[order])
        np.testing.assert_allclose(pairs.dist, dist[uav[order], target[order]])


def test_feasible_pairs_keep_zero_distance(hand_scene) -> None:
    pairs = feasible_pairs(hand_scene)
    assert (0, 0) in set(zip(pairs.uav.tolist(), pairs.target.tolist()))
    assert 3 not in pairs.uav  # UAV 3 reaches nothing


def test_mixed_scenes_draw_their_own_distribution_within_the_task_bounds() -> None:
    """task=mixed: seeded; needs, ranges and values inside the task's bounds, but each scene its own top need,
    range interval and density; both position patterns; the target count varies across a split."""
    dist = SceneDistribution(positions="mixed", need_max=5, range_min=1.5, range_max=8.0)
    a, b = generate_scenes(dist, 16, 96, seed=7), generate_scenes(dist, 16, 96, seed=7)
    assert all(np.array_equal(x.uav_pos, y.uav_pos) and np.array_equal(x.need, y.need) for x, y in zip(a, b))
    assert not np.array_equal(a[0].uav_pos, generate_scenes(dist, 16, 96, seed=8)[0].uav_pos)
    for s in a:
        assert 1 <= s.need.min() and s.need.max() <= 5 and s.uav_pos.min() >= 0 and s.target_pos.min() >= 0
        assert np.all((s.uav_range >= 1.5) & (s.uav_range <= 8.0))
        assert np.all(s.value >= s.need * dist.value_min - 1e-6) and np.all(s.value <= s.need * dist.value_max + 1e-6)
        # the square: (N + M) / side^2 is the scene's density, within 2x of the task's either way
        side = max(s.uav_pos.max(), s.target_pos.max())
        assert (s.n_uav + s.n_target) / side**2 >= dist.density / 2 - 1e-6
    assert {int(s.need.max()) for s in a} == {1, 2, 3, 4, 5}
    spread = np.array([np.ptp(s.uav_range) for s in a])
    assert spread.min() < 1.0 and spread.max() > 4.0  # homogeneous and heterogeneous ranges
    assert len({s.n_target for s in a}) >= 3 and all(4 <= s.n_target <= 16 for s in a)  # ratio 0.25-1

    # both patterns: mean nearest-target distance / its expectation for uniform points (0.5 side / sqrt(M))
    # is about 1.1 for uniform scenes (edges) and well below for clustered ones
    def clumping(s: Scene) -> float:
        side = max(s.uav_pos.max(), s.target_pos.max())
        nearest = np.sort(np.linalg.norm(s.target_pos[:, None] - s.target_pos[None], axis=2), 1)[:, 1]
        return nearest.mean() / (0.5 * side / math.sqrt(s.n_target))

    ratios = [clumping(s) for s in generate_scenes(dist, 200, 32, seed=7)]
    assert min(ratios) < 0.6 and max(ratios) > 1.0
