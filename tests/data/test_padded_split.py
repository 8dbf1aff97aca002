"""A cached split as padded tensors on the device (``PaddedSplit``) gives the ``GraphStore``'s batches'
policy and loss at fixed shapes, and training uses it when the dense attention path covers the stage."""

from __future__ import annotations

import json

import torch
from conftest import compose, compose_small

from uavgnn.algorithms.scene_policy import batch_imitation_loss
from uavgnn.data.cache import BuildSettings, SplitSpec, load_or_build
from uavgnn.data.padded import PaddedSplit
from uavgnn.data.stages import CurriculumSampler
from uavgnn.data.store import GraphStore
from uavgnn.infrastructure.perf import OpCounter
from uavgnn.models import TransformerGNN
from uavgnn.models.policy import policy_log_probs
from uavgnn.modes.train import run_train
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.graphs import build_graph, with_budget
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.solvers import solve_milp
from uavgnn.training.trainer import Trainer


def test_a_padded_split_gives_the_stores_policy_and_loss_at_fixed_shapes(labelled_store) -> None:
    torch.manual_seed(0)
    model = TransformerGNN(hidden=16, heads=2, layers=2)
    padded = PaddedSplit.of(labelled_store, 16)
    assert padded is not None and padded.slots == 6  # min(k_max, 6 targets)
    shapes = set()
    for ids in (torch.tensor([3, 0, 7, 5]), torch.tensor([31, 12, 8, 20])):
        plain, ours = with_budget(labelled_store.gather(ids), 4), with_budget(padded.gather(ids), 4)
        shapes.add(tuple((key, tuple(ours[key].shape)) for key in sorted(ours.keys()) if torch.is_tensor(ours[key])))
        for got, want in zip(batch_imitation_loss(model, ours, 64), batch_imitation_loss(model, plain, 64)):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        cand, idle, keep = policy_log_probs(model, ours, 4, dense_max_nodes=64)
        want_cand, want_idle, want_keep = policy_log_probs(model, plain, 4)
        valid = ours.cand_valid[keep]
        assert torch.equal(ours.cand_index[:, keep][:, valid], plain.cand_index[:, want_keep])
        torch.testing.assert_close(cand[valid], want_cand, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(idle, want_idle, rtol=1e-5, atol=1e-5)
        assert not bool(ours.cand_label[~ours.cand_valid].any())
        slots = ours.cand_index[1].view(4 * 12, 6).tolist()  # every UAV: 6 distinct targets, real ones first
        assert all(len(set(row)) == 6 for row in slots)
    assert len(shapes) == 1  # two different batches, one shape


def test_scenes_of_several_sizes_stay_a_graph_store(labelled_store) -> None:
    scenes = generate_scenes(SceneDistribution(), 8, 2, seed=1)
    labels = [solve_milp(s) for s in scenes]
    eight = GraphStore.from_graphs(
        [build_graph(s, 16, 6, r.assignment) for s, r in zip(scenes, labels)], scenes, labels
    )
    assert PaddedSplit.of(eight, 16) is not None
    assert PaddedSplit.of(GraphStore.concat([labelled_store, eight]), 16) is None


def test_training_with_the_dense_path_draws_fixed_shape_batches_and_follows_the_sparse_run(tmp_path) -> None:
    """``optim.dense_max_nodes`` covering the scenes: the run trains on the padded split, and its losses are the
    sparse run's on the same batches (fp32 sums in another order: rel 1e-4)."""
    trainer = Trainer(compose_small(tmp_path, "imitation", "optim.dense_max_nodes=64"), tmp_path / "probe")
    assert isinstance(trainer.work.batches.split, PaddedSplit)
    losses = []
    for dense in (0, 64):
        cfg = compose(
            "experiment=debug",
            "model=tiny",
            "data.n_uav=6",
            "logger=jsonl",
            "data.train_scenes=32",
            "data.val_scenes=8",
            "data.test_scenes=8",
            "hardware.batch_size=8",
            "train.steps=10",
            "train.log_every=1",
            f"optim.dense_max_nodes={dense}",
            f"data.cache_dir={tmp_path / 'c'}",
        )
        run_train(cfg, tmp_path / f"run{dense}")
        rows = [json.loads(line) for line in (tmp_path / f"run{dense}" / "metrics.jsonl").read_text().splitlines()]
        losses.append([r["train/loss"] for r in rows if "train/loss" in r])
    assert len(losses[0]) == 10
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), rtol=1e-4, atol=1e-5)


def test_a_curriculum_stage_draws_padded_batches_of_one_shape_with_the_stores_loss(tmp_path) -> None:
    """Padded splits under a curriculum: a stage's batch (its own scenes, then the same number from each earlier
    stage) has one shape at every step, and the imitation loss on it is the loss on the same scenes gathered
    from the ``GraphStore``s; a run whose every stage the dense path covers draws from them."""
    stores = [
        load_or_build(SplitSpec("train", n, 12, 100 + n), SceneDistribution(), BuildSettings(), tmp_path, workers=1)
        for n in (3, 5, 7)
    ]
    padded = [PaddedSplit.of(store, 16) for store in stores]
    dense, sparse = CurriculumSampler(stores, 1, padded), CurriculumSampler(stores, 1)
    torch.manual_seed(0)
    model = TransformerGNN(hidden=16, heads=2, layers=2)
    shapes = set()
    for step in (0, 1, 2):
        ours, plain = (with_budget(sampler.batch(step, 2, 10, 0.4), 4) for sampler in (dense, sparse))
        assert ours.n_uav.tolist() == plain.n_uav.tolist() == [7] * 6 + [3] * 2 + [5] * 2
        shapes.add(tuple((key, tuple(ours[key].shape)) for key in sorted(ours.keys()) if torch.is_tensor(ours[key])))
        with OpCounter() as count:  # the batch, the loss and its gradients: nothing read back on the host
            got = batch_imitation_loss(model, with_budget(dense.batch(step, 2, 10, 0.4), 4), 64)
            got[0].backward()
        assert count.syncs == 0, count.counts
        for value, want in zip(got, batch_imitation_loss(model, plain, 64)):
            torch.testing.assert_close(value, want, rtol=1e-6, atol=1e-6)
    assert len(shapes) == 1
    cfg = compose_small(
        tmp_path, "imitation", "optim.dense_max_nodes=64", "curriculum=aggressive", "curriculum.stages=[4,6]"
    )
    assert Trainer(cfg, tmp_path / "run").work.batches.sampler.padded is not None
