"""``data.source=generated``: every training step draws new scenes on the device (no dataset, no MILP labels).

Reward-driven training (``algorithm=reinforce``) needs no labels, so it need not
be limited to a few thousand cached scenes: each batch is ``generate_scene_batch``
+ ``build_graph_batch`` on the training device (faster than a step needs them,
BENCHMARKS.md), never copied from the host. The generator of step
``s`` is seeded by (seed, step, rank), so a batch is a pure function of them and
resume / rollback repeat exactly what an uninterrupted run saw; each rank of a
``torchrun`` job draws its own share of the global batch. With a curriculum, a
``replay[stage]`` share of every batch is drawn at the sizes of earlier stages, the
same number from each (``replay_counts``), as the cached sampler does. With
``data.fresh_sizes`` every step's scenes have one size drawn from the list (by (seed, step)), as many of them
as hold the nodes of ``hardware.batch_size`` scenes of ``data.n_uav``: training sees large scenes, their
truncated candidate lists and arena borders far away, at the cost of small ones. The batches are padded
(``build_graph_batch``): their shapes depend on the scene sizes and batch size only: one shape per size, or per
curriculum stage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.data import Batch

from uavgnn.data.padded import concat_batches
from uavgnn.data.stages import StageMix, replay_counts
from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.randomness import stream, stream_seed
from uavgnn.problem.graphs import build_graph_batch
from uavgnn.problem.scene_batch import generate_scene_batch
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.solvers.min_cost_flow import relax_candidates


@dataclass(frozen=True)
class FreshSettings:
    """What the scenes of a step are made of: the ``task``'s distribution, the ``data`` group's graph keys."""

    dist: SceneDistribution
    seed: int
    k_max: int = 32
    uav_neighbours: int = 8
    relaxation: bool = False  # the model reads the linear relaxation: every batch carries its pairs
    n_uav: int = 16  # ``data.n_uav``: with ``fresh_sizes``, a batch holds the nodes of batch_size such scenes
    fresh_sizes: tuple[int, ...] = ()  # ``data.fresh_sizes``: one drawn per step
    max_batch_size: int = 4096  # ``hardware.max_batch_size``: batch_size=auto's trial batches go up to it


class FreshScenes:
    """The batch of every step, generated on ``device``: ``next(step, stage, batch_size)`` like ``BatchSource``;
    ``mix``: the curriculum's stage batches (None: none)."""

    def __init__(self, settings: FreshSettings, mix: StageMix | None, sizes: list[int], device: torch.device) -> None:
        self.settings, self.mix, self.sizes, self.device = settings, mix, sizes, device
        self.dist = settings.dist
        self.ctx = distributed.context()

    def restart(self, step: int, batch_size: int) -> None:
        """Nothing to rewind: a batch is a pure function of (seed, step, rank)."""

    def _graphs(self, n_uav: int, count: int, generator: torch.Generator) -> Batch:
        scenes = generate_scene_batch(self.dist, n_uav, count, generator, self.device)
        batch = build_graph_batch(scenes, self.settings.k_max, self.settings.uav_neighbours)
        if self.settings.relaxation:  # one flow for the whole batch, on the host
            batch.cand_relaxed = relax_candidates(batch)
        return batch

    def n_uav_of(self, step: int, stage: int) -> int:
        """UAVs per scene of step ``step``: one of ``data.fresh_sizes`` drawn by (seed, step), else the stage's."""
        sizes = self.settings.fresh_sizes
        if not sizes:
            return self.sizes[stage]
        return int(
            sizes[int(np.random.default_rng(stream_seed(self.settings.seed, "fresh_size", step)).integers(len(sizes)))]
        )

    def next(self, step: int, stage: int, batch_size: int) -> Batch:
        seed = self.settings.seed
        if self.settings.fresh_sizes:  # one size per step, at the nodes of batch_size scenes of data.n_uav
            n_uav, n_base = self.n_uav_of(step, stage), self.settings.n_uav
            nodes = batch_size * (n_base + self.dist.n_targets(n_base))
            count = max(1, nodes // (n_uav + self.dist.n_targets(n_uav)) // self.ctx.world_size)
            return self._graphs(n_uav, count, stream(seed, "fresh_scenes", step, self.ctx.rank, self.device))
        n_stage = self.sizes[stage]
        if self.mix is not None:
            batch_size = self.mix.batch_size(n_stage + self.dist.n_targets(n_stage), batch_size)
        count = max(1, batch_size // self.ctx.world_size)
        generator = stream(seed, "fresh_scenes", step, self.ctx.rank, self.device)
        n_old = min(round(count * self.mix.replay[stage]), count - 1) if self.mix is not None and stage > 0 else 0
        parts = [self._graphs(n_stage, count - n_old, generator)]
        parts += [self._graphs(self.sizes[s], c, generator) for s, c in enumerate(replay_counts(n_old, stage)) if c]
        return concat_batches(parts)

    # what ``hardware.batch_size=auto`` probes (``gather(ids)``, ``len``)
    def __len__(self) -> int:
        return self.settings.max_batch_size  # a generator has no end: trial batches up to the cap

    def gather(self, ids: torch.Tensor) -> Batch:
        # step 0's draw (a pure function of it: probing changes nothing the run draws later)
        return self._graphs(
            self.sizes[-1], len(ids), stream(self.settings.seed, "fresh_scenes", 0, self.ctx.rank, self.device)
        )
