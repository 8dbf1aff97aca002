"""data.source=generated: fresh scenes every step, a pure function of (seed, step), curriculum replay included."""

from __future__ import annotations

import json

import torch
from conftest import compose
from torch_geometric.data import Batch

from uavgnn.algorithms.checkpoint_config import default_config
from uavgnn.config.settings import fresh_settings, stage_mix
from uavgnn.data.fresh_scenes import FreshScenes
from uavgnn.data.padded import concat_batches
from uavgnn.modes.train import run_train
from uavgnn.problem.graphs import build_graph_batch
from uavgnn.problem.scene_batch import generate_scene_batch
from uavgnn.problem.scenes import SceneDistribution

CPU = torch.device("cpu")


def fresh_cfg(**curriculum):
    cfg = default_config("reinforce")
    cfg.data.source, cfg.seed = "generated", 7
    cfg.data.update(k_max=6, uav_neighbours=4)
    if curriculum:
        cfg.curriculum.update(name="custom", **curriculum)
    return cfg


def fresh(cfg, sizes: list[int]) -> FreshScenes:
    """The generated batches of a run with this config (what ``algorithm=reinforce`` trains on)."""
    return FreshScenes(fresh_settings(cfg), stage_mix(cfg), sizes, CPU)


def same_batch(a: Batch, b: Batch) -> bool:
    keys = ("x", "cand_index", "cand_attr", "cand_rank", "uu_index", "uu_attr", "need", "batch", "ptr")
    return all(torch.equal(a[k], b[k]) for k in keys)


def test_a_steps_batch_depends_on_the_seed_and_step_only() -> None:
    """What resume and rollback rely on: a new source, asked for steps in another order, repeats each batch."""
    first, second = fresh(fresh_cfg(), [10]), fresh(fresh_cfg(), [10])
    batches = {step: first.next(step, 0, 16) for step in (0, 1, 2)}
    second.restart(2, 16)
    assert same_batch(second.next(2, 0, 16), batches[2]) and same_batch(second.next(0, 0, 16), batches[0])
    assert not torch.equal(batches[0].x, batches[1].x)  # new scenes every step
    assert batches[0].num_graphs == 16 and batches[0].num_nodes == 16 * 15
    other_seed = fresh_cfg()
    other_seed.seed = 8
    assert not torch.equal(fresh(other_seed, [10]).next(0, 0, 16).x, batches[0].x)


def test_curriculum_replay_mixes_earlier_sizes_into_one_valid_batch() -> None:
    cfg = fresh_cfg(stages=[4, 8, 12], replay=[0.0, 0.5, 0.5], batch_policy="fixed")
    source = fresh(cfg, [4, 8, 12])
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


def test_fresh_sizes_draw_one_size_per_step_at_the_batchs_node_count() -> None:
    """``data.fresh_sizes``: each step's scenes all have one of the sizes, drawn by (seed, step), as many as hold
    the nodes of ``batch_size`` scenes of ``data.n_uav`` (16 UAVs + 8 targets = 24 nodes each here)."""
    cfg = fresh_cfg()
    cfg.data.fresh_sizes = [16, 32, 64]
    source = fresh(cfg, [16])
    seen = set()
    for step in range(12):
        batch = source.next(step, 0, 8)
        n_uav = source.n_uav_of(step, 0)
        nodes = n_uav + SceneDistribution().n_targets(n_uav)
        assert set(batch.n_uav.tolist()) == {n_uav} and batch.num_graphs == 8 * 24 // nodes
        assert fresh(cfg, [16]).n_uav_of(step, 0) == n_uav  # a pure function of (seed, step)
        seen.add(n_uav)
    assert seen == {16, 32, 64}


def test_concatenated_batches_equal_one_batch_of_the_same_scenes() -> None:
    scenes = generate_scene_batch(SceneDistribution(), 6, 8, torch.Generator().manual_seed(0), CPU)
    whole = build_graph_batch(scenes, 6, 4)
    halves = [
        build_graph_batch(
            type(scenes)(
                scenes.uav_pos[s],
                scenes.uav_range[s],
                scenes.target_pos[s],
                scenes.need[s],
                scenes.value[s],
                scenes.side,
                scenes.lam,
            ),
            6,
            4,
        )
        for s in (slice(0, 3), slice(3, 8))
    ]
    joined = concat_batches(halves)
    assert same_batch(joined, whole) and joined.num_graphs == 8 and torch.equal(joined.scene_id, torch.arange(8))


def test_training_on_fresh_scenes_resumes_exactly(tmp_path) -> None:
    """algorithm=reinforce on data.source=generated, the real loop in this process: stopped at step 10 and
    resumed to 20, it ends with the weights of a straight run; no training split is ever labelled."""

    def train(run: str, steps: int, resume: bool) -> None:
        overrides = [
            "experiment=debug",
            "logger=jsonl",
            "model=tiny",
            "algorithm=reinforce",
            "algorithm.samples=4",
            "data.source=generated",
            "train.warmup_steps=0",
            "train.ckpt_every=10",
            "train.schedule=plateau",  # an LR that does not depend on train.steps
            f"data.cache_dir={tmp_path / 'cache'}",
            f"train.steps={steps}",
            f"resume={resume}",
        ]
        run_train(compose(*overrides), tmp_path / run)

    train("resumed", 10, False)
    train("resumed", 20, True)
    train("straight", 20, False)
    resumed, straight = (
        torch.load(tmp_path / run / "last.pt", weights_only=False)["model"] for run in ("resumed", "straight")
    )
    for name in straight:
        torch.testing.assert_close(resumed[name], straight[name], rtol=0, atol=0)
    rows = [json.loads(line) for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows if "train/entropy" in r]
    assert steps == sorted(set(steps)) and steps[-1] == 20  # no lost or repeated step across the resume
    cached = [p.name for p in (tmp_path / "cache").iterdir()]
    assert cached and not [name for name in cached if name.startswith("train-")]  # validation only: no training split
