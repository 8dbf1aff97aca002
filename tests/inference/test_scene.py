"""A trained policy on one scene (``uavgnn.inference.scene``): large scenes put in a spatial order first."""

import numpy as np
import pytest
import torch

from uavgnn.models import TransformerGNN


def test_huge_scene_node_reordering_gives_the_same_assignment(monkeypatch) -> None:
    """Large scenes are put in Morton order before the build (memory locality); the answer is mapped back to
    the caller's numbering and equals the unordered one."""
    from uavgnn.inference import scene as inference
    from uavgnn.problem.generator import generate_scenes
    from uavgnn.problem.graphs import GraphSettings
    from uavgnn.problem.scenes import SceneDistribution

    torch.manual_seed(0)
    model = TransformerGNN(hidden=32, heads=2, layers=2)
    scene = generate_scenes(SceneDistribution(positions="clustered"), 300, 1, seed=8)[0]
    plain, _ = inference.solve_with_model(model, scene, GraphSettings())
    ordered_scene, uav_order, target_order = inference.spatial_order(scene)
    assert not np.array_equal(uav_order, np.arange(scene.n_uav))  # the order does change
    np.testing.assert_array_equal(ordered_scene.need, scene.need[target_order])
    monkeypatch.setattr(inference, "SPATIAL_ORDER", 1)
    ordered, _ = inference.solve_with_model(model, scene, GraphSettings())
    np.testing.assert_array_equal(ordered.assignment, plain.assignment)
    assert ordered.objective == pytest.approx(plain.objective)
