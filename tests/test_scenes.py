import math

import numpy as np
import pytest

from uavgnn.problem.scenes import SceneDistribution, feasible_pairs, generate_scenes


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


def test_feasible_pairs_match_brute_force() -> None:
    for scene in generate_scenes(SceneDistribution(positions="clustered"), 40, 5, seed=9):
        dist = np.linalg.norm(scene.uav_pos[:, None] - scene.target_pos[None], axis=2)
        expected = {(i, j) for i, j in zip(*np.nonzero(dist <= scene.uav_range[:, None]))}
        pairs = feasible_pairs(scene)
        assert set(zip(pairs.uav.tolist(), pairs.target.tolist())) == expected
        np.testing.assert_allclose(pairs.dist, dist[pairs.uav, pairs.target])
        # sorted by UAV, then distance
        key = pairs.uav * 1e6 + pairs.dist
        assert np.all(np.diff(key) >= 0)


def test_feasible_pairs_keep_zero_distance(hand_scene) -> None:
    pairs = feasible_pairs(hand_scene)
    assert (0, 0) in set(zip(pairs.uav.tolist(), pairs.target.tolist()))
    assert 3 not in pairs.uav  # UAV 3 reaches nothing
