import numpy as np
import pytest
import torch
from torch_geometric.data import Batch

from uavgnn.data.store import GraphStore
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.graphs import (
    EDGE_DIM,
    NODE_DIM,
    adaptive_k,
    build_graph,
    build_graph_batch,
    candidate_recall,
    message_edges,
)
from uavgnn.problem.neighbours import grid_neighbours, kdtree_neighbours
from uavgnn.problem.scene_batch import SceneBatch
from uavgnn.problem.scenes import Scene, SceneDistribution, feasible_pairs
from uavgnn.solvers import solve_milp


def test_adaptive_k_formula() -> None:
    assert [adaptive_k(n, 4, 4, 16) for n in (4, 16, 17, 40, 64, 1000)] == [4, 4, 5, 10, 16, 16]
    assert adaptive_k(16, 8, 4, 16) == 8


def test_candidate_recall_by_hand() -> None:
    # UAV0 at (0,0) has targets at distance 1, 2, 3 and takes the farthest (rank 2);
    # UAV1 at (0,5) takes T0, its nearest (rank 0).
    scene = Scene(
        uav_pos=np.array([[0.0, 0.0], [0.0, 5.0]]),
        uav_range=np.array([10.0, 10.0]),
        target_pos=np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]]),
        need=np.array([1, 1, 1]),
        value=np.array([1.0, 1.0, 1.0]),
        lam=0.1,
    )
    graph = build_graph(scene, k_max=16, assignment=np.array([2, 0]))
    assert candidate_recall([graph], 1) == 0.5
    assert candidate_recall([graph], 2) == 0.5
    assert candidate_recall([graph], 3) == 1.0


def test_candidates_are_nearest_feasible_sorted() -> None:
    scene = generate_scenes(SceneDistribution(), 40, 1, seed=2)[0]
    graph = build_graph(scene, k_max=5)
    pairs = feasible_pairs(scene)
    for i in range(scene.n_uav):
        mine = graph.cand_index[1, graph.cand_index[0] == i] - scene.n_uav
        expected = pairs.target[pairs.uav == i][:5]
        assert mine.tolist() == expected.tolist()
        d = np.linalg.norm(scene.target_pos[mine.numpy()] - scene.uav_pos[i], axis=1)
        assert np.all(d <= scene.uav_range[i]) and np.all(np.diff(d) >= 0)


def test_graph_is_translation_invariant() -> None:
    scene = generate_scenes(SceneDistribution(positions="clustered"), 24, 1, seed=4)[0]
    a = build_graph(scene, assignment=solve_milp(scene).assignment)
    b = build_graph(scene.translated(np.array([123.0, -45.0])), assignment=solve_milp(scene).assignment)
    for key in a.keys():
        if torch.is_tensor(a[key]):
            assert torch.allclose(a[key].float(), b[key].float(), atol=1e-5), key
    assert a.x.shape[1] == NODE_DIM and a.cand_attr.shape[1] == EDGE_DIM


def test_gather_equals_pyg_collate() -> None:
    scenes = generate_scenes(SceneDistribution(), 12, 10, seed=0)
    labels = [solve_milp(s) for s in scenes]
    graphs = [build_graph(s, 16, 8, r.assignment) for s, r in zip(scenes, labels)]
    store = GraphStore.from_graphs(graphs, scenes, labels)
    ids = torch.tensor([7, 2, 9, 0])
    fast, reference = store.gather(ids), Batch.from_data_list([store.get(int(i)) for i in ids])
    for key in reference.keys():
        value = reference[key]
        assert torch.equal(fast[key], value) if torch.is_tensor(value) else fast[key] == value, key
    edge_index, edge_attr, kept, _ = message_edges(fast, k=3)  # the kept candidates' indices, sized on the host
    assert edge_index.shape[1] == 2 * kept.numel() + fast.uu_index.shape[1] == edge_attr.shape[0]
    assert torch.equal(kept, (fast.cand_rank < 3).nonzero().squeeze(1))
    np.testing.assert_allclose(store.scene(2).uav_pos, scenes[2].uav_pos)
    np.testing.assert_array_equal(store.label_assignments()[2], labels[2].assignment)


def assert_same_neighbours(scene: Scene, a, b) -> None:
    """Neighbours ``b`` (torch) equal the k-d tree's ``a``; UAV neighbours by the distances they imply
    (clipped clustered positions can tie)."""
    for field in ("c_uav", "c_tgt", "c_rank", "n_feasible", "n_reach", "uu_src"):
        np.testing.assert_array_equal(np.asarray(getattr(a, field)), getattr(b, field).numpy(), err_msg=field)
    for field in ("c_dist", "nearest", "uu_dist"):
        np.testing.assert_allclose(np.asarray(getattr(a, field)), getattr(b, field).numpy(), err_msg=field)
    implied = np.linalg.norm(scene.uav_pos[b.uu_src.numpy()] - scene.uav_pos[b.uu_dst.numpy()], axis=1)
    np.testing.assert_allclose(implied, a.uu_dist)


def test_grid_neighbours_equal_the_kdtree_ones() -> None:
    """The device path for huge scenes (a cell grid of side max range, UAVs in blocks), run here on the CPU:
    uniform and clustered scenes, a sparse one where UAV neighbours lie beyond the 3 x 3 cells (the exact
    fallback), and scenes too small for the requested counts."""
    sparse = Scene(
        uav_pos=np.array([[0.0, 0.0], [0.5, 0.0], [40.0, 40.0], [80.0, 0.0]]),
        uav_range=np.array([1.0, 2.0, 1.5, 1.0]),
        target_pos=np.array([[1.0, 0.0], [40.0, 41.0]]),
        need=np.array([1, 2]),
        value=np.array([1.0, 3.0]),
        lam=0.1,
    )
    scenes = (
        generate_scenes(SceneDistribution(), 300, 1, seed=1)
        + [sparse]
        + generate_scenes(SceneDistribution(positions="clustered"), 120, 2, seed=2)
        + generate_scenes(SceneDistribution(), 2, 1, seed=3)
    )
    for scene in scenes:
        expected = kdtree_neighbours(scene, 6, 5)
        assert_same_neighbours(scene, expected, grid_neighbours(SceneBatch.from_scenes([scene]), 6, 5, block=37))


@pytest.mark.parametrize("positions", ["uniform", "clustered"])
def test_batched_builder_equals_the_per_scene_graphs(positions) -> None:
    """B scenes built at once on the device give the graphs of ``build_graph``, batched by PyG, once the
    padding slots are left out; every UAV has the same number of slots and the padding ones hold other,
    unreachable targets."""
    scenes = generate_scenes(SceneDistribution(positions=positions), 10, 12, seed=5)
    ours = build_graph_batch(SceneBatch.from_scenes(scenes), 6, 4)
    reference = Batch.from_data_list([build_graph(s, 6, 4) for s in scenes])
    valid = ours.cand_valid
    assert 0 < int(valid.sum()) < valid.numel() == 12 * 10 * 5  # slots: min(k_max, 5 targets) per UAV
    node_and_candidate_keys = [key for key in reference.keys() if not key.startswith("uu_")]
    for key in node_and_candidate_keys:
        value, mine = reference[key], ours[key]
        if key.startswith("cand_"):
            mine = mine[:, valid] if key == "cand_index" else mine[valid]
        if torch.is_tensor(value) and value.is_floating_point():
            torch.testing.assert_close(mine, value, msg=key)
        elif torch.is_tensor(value):
            assert torch.equal(mine, value), key
        else:
            assert mine == value, key
    uav, target = ours.cand_index - ours.ptr[ours.batch[ours.cand_index[0]]]
    scene_of = ours.batch[ours.cand_index[0]]
    for slot in torch.nonzero(~valid).squeeze(1).tolist():
        scene = scenes[int(scene_of[slot])]
        gap = np.linalg.norm(scene.uav_pos[int(uav[slot])] - scene.target_pos[int(target[slot]) - 10])
        assert gap > scene.uav_range[int(uav[slot])]
    per_uav = ours.cand_index.view(2, 12 * 10, 5)[1]
    assert all(len(set(row)) == 5 for row in per_uav.tolist())  # a target at most once per UAV
    assert ours.num_graphs == 12 and torch.equal(ours.n_uav, torch.full((12,), 10))
    for s, scene in enumerate(scenes):  # UAV neighbours: per scene, as the k-d tree finds them (up to ties)
        nodes = scene.n_uav + scene.n_target
        first = nodes * s
        mine = (ours.uu_index[0] >= first) & (ours.uu_index[0] < first + nodes)
        src, dst = ours.uu_index[:, mine] - first
        expected = kdtree_neighbours(scene, 6, 4)
        np.testing.assert_array_equal(src.numpy(), expected.uu_src)
        implied = np.linalg.norm(scene.uav_pos[src.numpy()] - scene.uav_pos[dst.numpy()], axis=1)
        np.testing.assert_allclose(implied, expected.uu_dist)
    if positions == "uniform":  # no ties: every edge and feature identical
        assert torch.equal(ours.uu_index, reference.uu_index)
        torch.testing.assert_close(ours.uu_attr, reference.uu_attr)


def test_features_by_hand() -> None:
    """Two UAVs (ranges 4 and 2), one target of need 2 worth 3 at distance 3 from UAV 0, lam 0.1."""
    scene = Scene(
        uav_pos=np.array([[0.0, 0.0], [0.0, 1.0]]),
        uav_range=np.array([4.0, 2.0]),
        target_pos=np.array([[3.0, 0.0]]),
        need=np.array([2]),
        value=np.array([3.0]),
        lam=0.1,
    )
    g = build_graph(scene, k_max=4, uav_neighbours=1)
    # UAV 0: squash(range 4, 4), squash(1 feasible target, 8), nearest 3 / range 4, squash(lam 0.1, 0.1)
    torch.testing.assert_close(g.x[0], torch.tensor([1, 0, 0.5, 1 / 9, 0.75, 0.5]))
    # target: 1 / need, squash(value per slot 1.5, 1.5), squash(1 UAV in reach, 8), min(reach / need, 4) / 4
    torch.testing.assert_close(g.x[2], torch.tensor([0, 1, 0.5, 0.5, 1 / 9, 0.125]))
    assert g.cand_index.tolist() == [[0], [2]]  # UAV 1 (range 2) cannot reach the target at distance sqrt(10)
    # displacement / range, distance / range, squash(travel cost lam * 3 / 1.5 = 0.2, 1)
    torch.testing.assert_close(g.cand_attr[0], torch.tensor([1, 0, 0, 0.75, 0, 0.75, 0.2 / 1.2]))
    # UAV 0 -> UAV 1 at distance 1: displacement / (d + r) = (0, 1/5), d / (d + r), r_1 / (r_1 + r_0)
    edge = (g.uu_index[0] == 0).nonzero().item()
    torch.testing.assert_close(g.uu_attr[edge], torch.tensor([0, 0, 1, 0, 0.2, 0.2, 1 / 3]))


def test_features_stay_bounded_under_any_valid_scene() -> None:
    """No fixed-constant scaling that assumes need <= 3 or range <= 5: needs up to 9, ranges up to 40,
    lam 2, sparse and dense squares, mixed scenes; every feature in [-1, 1]."""
    extreme = [
        SceneDistribution(need_max=9, range_min=0.1, range_max=40.0, lam=2.0, density=0.05),
        SceneDistribution(positions="clustered", density=20.0, value_min=0.01, value_max=50.0),
        SceneDistribution(positions="mixed", need_max=6, range_max=12.0),
    ]
    for dist in extreme:
        for scene in generate_scenes(dist, 24, 8, seed=1):
            g = build_graph(scene)
            for key in ("x", "cand_attr", "uu_attr"):
                assert g[key].abs().max() <= 1.0, (dist, key)
