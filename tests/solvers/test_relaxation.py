"""A policy that reads the linear relaxation. The relaxation's pairs on a graph's candidates
(``relax_candidates``: one min-cost flow for a whole batch) equal each scene's own relaxation; its inputs
(``relaxation_inputs``) on hand-worked scenes; a model built with ``relaxation`` reads them, on every path that
makes graphs for it (cache, fresh batches, single scenes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_scale_solvers import lp_optimum, slot_profit
from torch_geometric.data import Batch

from uavgnn.data.store import GraphStore
from uavgnn.inference.scene import scene_graph
from uavgnn.models import TransformerGNN
from uavgnn.models.policy import policy_log_probs
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.graphs import GraphSettings, build_graph, build_graph_batch, relaxation_inputs
from uavgnn.problem.scene_batch import SceneBatch
from uavgnn.problem.scenes import Scene, SceneDistribution
from uavgnn.solvers import solve_milp
from uavgnn.solvers.min_cost_flow import relax_candidates, relaxed_assignment


def chosen_targets(graph, n_uav: int, offset: int = 0) -> np.ndarray:
    """Target per UAV (-1 idle) of a graph's relaxed candidates, for the UAV nodes ``offset .. offset + n_uav``."""
    uav, target = graph.cand_index[:, graph.cand_relaxed].numpy()
    assignment = np.full(n_uav, -1)
    assignment[uav - offset] = target - offset - n_uav
    return assignment


@pytest.mark.parametrize("positions", ["uniform", "clustered"])
def test_one_flow_for_a_batch_is_each_scenes_relaxation(positions) -> None:
    scenes = generate_scenes(SceneDistribution(positions=positions), 40, 4, seed=7)
    graphs = [build_graph(s, 32, 8) for s in scenes]
    batch = Batch.from_data_list(graphs)
    batch.cand_relaxed = relax_candidates(batch)
    nodes = 0
    for scene in scenes:
        mine = (batch.cand_index[0] >= nodes) & (batch.cand_index[0] < nodes + scene.n_uav)
        relaxed = chosen_targets(
            Batch(cand_index=batch.cand_index[:, mine], cand_relaxed=batch.cand_relaxed[mine]), scene.n_uav, nodes
        )
        assert np.array_equal(relaxed, relaxed_assignment(scene, k=32))
        nodes += scene.n_uav + scene.n_target


def test_the_relaxation_on_every_candidate_is_the_lp_optimum() -> None:
    for scene in generate_scenes(SceneDistribution(), 30, 3, seed=5):  # 30 UAVs: k_max covers every feasible pair
        graph = build_graph(scene, 64, 8)
        relaxed = chosen_targets(
            type(graph)(cand_index=graph.cand_index, cand_relaxed=relax_candidates(graph)), scene.n_uav
        )
        assert slot_profit(scene, relaxed) == pytest.approx(lp_optimum(scene), abs=1e-4)


def test_a_padded_batch_leaves_its_padding_out() -> None:
    scenes = generate_scenes(SceneDistribution(range_min=1.0, range_max=2.0), 12, 3, seed=4)  # short ranges: padding
    batch = build_graph_batch(SceneBatch.from_scenes(scenes), k_max=8, uav_neighbours=4)
    assert not batch.cand_valid.all()
    relaxed = relax_candidates(batch)
    assert not (relaxed & ~batch.cand_valid).any()
    per_scene = batch.num_nodes // len(scenes)
    for g, scene in enumerate(scenes):
        uav_nodes = (batch.cand_index[0] >= g * per_scene) & (batch.cand_index[0] < (g + 1) * per_scene)
        relaxed_g = Batch(cand_index=batch.cand_index[:, uav_nodes], cand_relaxed=relaxed[uav_nodes])
        assert np.array_equal(chosen_targets(relaxed_g, scene.n_uav, g * per_scene), relaxed_assignment(scene, k=8))


def test_relaxation_inputs_on_hand_worked_scenes() -> None:
    """Target 0 needs 2 and both UAVs reach it: complete. Target 1 needs 2 but only UAV 2 reaches it: the
    relaxation sends it there anyway (half a target's value per slot beats idling) and leaves it partial."""
    scene = Scene(
        uav_pos=np.array([[0.0, 0.0], [0.5, 0.0], [9.0, 0.0]]),
        uav_range=np.array([2.0, 2.0, 2.0]),
        target_pos=np.array([[0.2, 0.0], [9.5, 0.0]]),
        need=np.array([2, 2]),
        value=np.array([2.0, 2.0]),
        lam=0.1,
    )
    graph = build_graph(scene, 4, 2)
    graph.cand_relaxed = relax_candidates(graph)
    node, edge = relaxation_inputs(graph)
    # nodes: UAVs 0, 1, 2 [sent, its target complete, its target partial]; targets 3, 4 [fill, complete, partial]
    assert node.tolist() == [[1, 1, 0], [1, 1, 0], [1, 0, 1], [1, 1, 0], [0.5, 0, 1]]
    chosen = {(int(u), int(t)) for u, t in graph.cand_index[:, graph.cand_relaxed].T}
    assert chosen == {(0, 3), (1, 3), (2, 4)} and edge[:, 0].tolist() == graph.cand_relaxed.float().tolist()
    assert solve_milp(scene).assignment.tolist() == [0, 0, -1]  # what the model is to learn: drop the partial one


def test_a_model_that_reads_the_relaxation_sees_it_on_every_path() -> None:
    scenes = generate_scenes(SceneDistribution(), 10, 4, seed=1)
    labels = [solve_milp(s) for s in scenes]
    store = GraphStore.from_graphs(
        [build_graph(s, 16, 6, r.assignment) for s, r in zip(scenes, labels)], scenes, labels
    )  # the cache's path: the store adds the relaxation's pairs
    batch = store.gather(torch.arange(4))
    torch.manual_seed(0)
    reading, plain = TransformerGNN(32, 2, 2, relaxation=True).eval(), TransformerGNN(32, 2, 2).eval()
    with torch.no_grad():
        before = policy_log_probs(reading, batch, 8)[0]
        batch.cand_relaxed = ~batch.cand_relaxed
        assert not torch.allclose(before, policy_log_probs(reading, batch, 8)[0])  # it reads them
        del batch.cand_relaxed
        policy_log_probs(plain, batch, 8)  # a model that does not read them needs none
    single = scene_graph(reading, scenes[0], GraphSettings(k_max=16, uav_neighbours=6))
    assert torch.equal(single.cand_relaxed, store.get(0).cand_relaxed)
    assert "cand_relaxed" not in scene_graph(plain, scenes[0], GraphSettings(k_max=16, uav_neighbours=6))
