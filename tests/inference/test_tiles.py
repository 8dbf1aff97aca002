"""Scoring in tiles (``uavgnn.inference.tiles``): the whole scene's decision, from one tile's graph at a time."""

import numpy as np
import pytest
import torch

from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.inference.scene import score_scene, solve_with_model
from uavgnn.inference.tiles import cut_tiles, halo_width
from uavgnn.models import TransformerGNN
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.graphs import GraphSettings
from uavgnn.problem.neighbours import nearest_uavs
from uavgnn.problem.scenes import SceneDistribution


@pytest.mark.parametrize("positions", ["uniform", "clustered"])
def test_tiles_decide_what_the_whole_scene_decides(positions: str) -> None:
    """The pretrained policy (it reads the relaxation and balances), on a scene whose tiles each leave part of it
    out: the same candidates, relaxation, log-probabilities and assignment as the whole scene in one graph."""
    model, graph, _ = load_policy("pretrained", torch.device("cpu"), "test")
    scene = generate_scenes(SceneDistribution(positions=positions), 6000, 1, seed=3)[0]
    tiles = cut_tiles(scene, 700, halo_width(scene, graph.uav_neighbours, len(model.layers)))
    assert len(tiles) >= 4 and all(len(tile.uav) < scene.n_uav for tile in tiles)  # no tile sees everything
    whole, tiled = (score_scene(model, scene, graph, tile_uavs=size) for size in (scene.n_uav, 700))
    assert torch.equal(tiled.batch.cand_index, whole.batch.cand_index)
    assert torch.equal(tiled.batch.cand_relaxed, whole.batch.cand_relaxed)
    assert torch.equal(tiled.keep, whole.keep)
    torch.testing.assert_close(tiled.cand_logp, whole.cand_logp, atol=1e-5, rtol=0)
    torch.testing.assert_close(tiled.idle_logp, whole.idle_logp, atol=1e-5, rtol=0)
    decided = [solve_with_model(model, scene, graph, tile_uavs=size)[0] for size in (scene.n_uav, 700)]
    np.testing.assert_array_equal(decided[1].assignment, decided[0].assignment)


def test_a_refining_model_decides_the_same_in_tiles() -> None:
    """A model that decides again on its last decision: the rounds between go over the whole scene."""
    torch.manual_seed(0)
    model = TransformerGNN(hidden=32, heads=2, layers=1, refine_rounds=1)
    scene = generate_scenes(SceneDistribution(), 3000, 1, seed=4)[0]
    graph = GraphSettings(k_max=16)
    decided = [solve_with_model(model, scene, graph, tile_uavs=size)[0] for size in (scene.n_uav, 300)]
    assert (decided[0].assignment >= 0).any()
    np.testing.assert_array_equal(decided[1].assignment, decided[0].assignment)


def test_the_tiles_cover_every_uav_once_with_all_it_reaches() -> None:
    """Each UAV is in one core; its tile holds every target in its range and its UAV neighbours (brute force)."""
    scene = generate_scenes(SceneDistribution(positions="clustered"), 2000, 1, seed=5)[0]
    tiles = cut_tiles(scene, 200, halo_width(scene, 8, 2))
    cores = np.concatenate([tile.uav[tile.core] for tile in tiles])
    np.testing.assert_array_equal(np.sort(cores), np.arange(scene.n_uav))
    uav_gap = np.linalg.norm(scene.uav_pos[:, None] - scene.uav_pos[None], axis=2)
    target_gap = np.linalg.norm(scene.uav_pos[:, None] - scene.target_pos[None], axis=2)
    for tile in tiles:
        for uav in tile.uav[tile.core]:
            assert set(np.flatnonzero(target_gap[uav] <= scene.uav_range[uav])) <= set(tile.target)
            assert set(np.argsort(uav_gap[uav], kind="stable")[1:9]) <= set(tile.uav)


def test_uav_neighbours_at_equal_distances_go_to_the_lower_number() -> None:
    """Four UAVs one away from UAV 0 (and a fifth twice as far): its two neighbours are UAVs 1 and 2 whatever the
    order the points are given in; two UAVs at one point are each other's nearest, never their own."""
    pos = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [2.0, 0.0], [2.0, 0.0]])
    src, dst, dist = nearest_uavs(pos, 2)
    assert dst[src == 0].tolist() == [1, 2] and dist[src == 0].tolist() == [1.0, 1.0]
    assert dst[src == 5][0] == 6 and dst[src == 6][0] == 5
    assert not (src == dst).any()
    flipped = pos[::-1].copy()  # the same points numbered backwards: UAV 0 is now 6, its four at one are 2 to 5
    src, dst, _ = nearest_uavs(flipped, 2)
    assert dst[src == 6].tolist() == [2, 3]
