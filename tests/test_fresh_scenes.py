"""data.source=generated: fresh scenes every step, a pure function of (seed, step), curriculum replay included."""

from __future__ import annotations

import torch
from omegaconf import OmegaConf
from torch_geometric.data import Batch

from uavgnn.config import Config
from uavgnn.problem.graphs import build_graph_batch
from uavgnn.problem.scene_batch import generate_scene_batch
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.training.fresh_scenes import FreshScenes, concat_batches

CPU = torch.device("cpu")


def fresh_cfg(**curriculum):
    cfg = OmegaConf.structured(Config)
    cfg.data.source, cfg.algorithm.name, cfg.seed = "generated", "reinforce", 7
    cfg.data.update(k_max=6, uav_neighbours=4)
    if curriculum:
        cfg.curriculum.update(name="custom", **curriculum)
    return cfg


def same_batch(a: Batch, b: Batch) -> bool:
    keys = ("x", "cand_index", "cand_attr", "cand_rank", "uu_index", "uu_attr", "need", "batch", "ptr")
    return all(torch.equal(a[k], b[k]) for k in keys)


def test_a_steps_batch_depends_on_the_seed_and_step_only() -> None:
    """What resume and rollback rely on: a new source, asked for steps in another order, repeats each batch."""
    first, second = FreshScenes(fresh_cfg(), [10], CPU), FreshScenes(fresh_cfg(), [10], CPU)
    batches = {step: first.next(step, 0, 16) for step in (0, 1, 2)}
    second.restart(2, 16)
    assert same_batch(second.next(2, 0, 16), batches[2]) and same_batch(second.next(0, 0, 16), batches[0])
    assert not torch.equal(batches[0].x, batches[1].x)  # new scenes every step
    assert batches[0].num_graphs == 16 and batches[0].num_nodes == 16 * 15
    other_seed = fresh_cfg()
    other_seed.seed = 8
    assert not torch.equal(FreshScenes(other_seed, [10], CPU).next(0, 0, 16).x, batches[0].x)


def test_curriculum_replay_mixes_earlier_sizes_into_one_valid_batch() -> None:
    cfg = fresh_cfg(stages=[4, 8, 12], replay=[0.0, 0.5, 0.5], batch_policy="fixed")
    source = FreshScenes(cfg, [4, 8, 12], CPU)
    assert set(source.next(0, 0, 20).n_uav.tolist()) == {4}
    batch = source.next(3, 2, 20)
    sizes = batch.n_uav.tolist()
    assert len(sizes) == 20 and sizes[:10] == [12] * 10 and set(sizes[10:]) <= {4, 8}
    nodes = torch.tensor([n + SceneDistribution().n_targets(n) for n in sizes])
    assert torch.equal(batch.ptr, torch.cat([torch.zeros(1, dtype=torch.long), nodes.cumsum(0)]))
    assert torch.equal(torch.bincount(batch.batch), nodes)
    for index in (batch.cand_index, batch.uu_index):  # every edge stays inside its own scene
        assert torch.equal(batch.batch[index[0]], batch.batch[index[1]])
    assert bool((batch.node_type[batch.cand_index[0]] == 0).all() and (batch.node_type[batch.cand_index[1]] == 1).all())


def test_concatenated_batches_equal_one_batch_of_the_same_scenes() -> None:
    scenes = generate_scene_batch(SceneDistribution(), 6, 8, torch.Generator().manual_seed(0), CPU)
    whole = build_graph_batch(scenes, 6, 4)
    halves = [build_graph_batch(type(scenes)(scenes.uav_pos[s], scenes.uav_range[s], scenes.target_pos[s],
                                             scenes.need[s], scenes.value[s], scenes.side, scenes.lam), 6, 4)
              for s in (slice(0, 3), slice(3, 8))]
    joined = concat_batches(halves)
    assert same_batch(joined, whole) and joined.num_graphs == 8 and torch.equal(joined.scene_id, torch.arange(8))
