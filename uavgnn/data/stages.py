"""The batches of a curriculum's stages: a stage's batch size, and its scenes mixed with earlier stages'.

Batches are drawn with replacement from a seeded generator keyed by (seed, step), so a resumed run sees
exactly the batches it would have seen.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch_geometric.data import Batch

from uavgnn.data.padded import PaddedSplit, concat_batches
from uavgnn.data.store import GraphStore
from uavgnn.infrastructure.randomness import stream


@dataclass(frozen=True)
class StageMix:
    """How a curriculum stage's batch is made (the ``curriculum`` group's batch keys)."""

    batch_policy: str = "nodes"  # ``stage_batch_size``'s policy
    node_budget: int = 1536
    replay: tuple[float, ...] = ()  # earlier stages' share of a batch, per stage

    def batch_size(self, n_nodes: int, batch_size: int) -> int:
        return stage_batch_size(self.batch_policy, n_nodes, batch_size, self.node_budget)


def stage_batch_size(policy: str, n_nodes: int, batch_size: int, node_budget: int) -> int:
    """Graphs per batch at a stage whose scenes have ``n_nodes`` nodes (UAVs + targets).

    ``by_scale``: the original guide's rule (N+M <= 8: 128, <= 16: 64, <= 24: 32, else 16);
    ``nodes``: as many graphs as fit ``node_budget`` nodes; ``fixed``: ``batch_size`` at every stage.
    """
    if policy == "by_scale":
        return 128 if n_nodes <= 8 else 64 if n_nodes <= 16 else 32 if n_nodes <= 24 else 16
    if policy == "nodes":
        return max(1, node_budget // n_nodes)
    if policy == "fixed":
        return batch_size
    raise ValueError(f"curriculum.batch_policy: unknown policy {policy!r} (expected by_scale, nodes or fixed)")


def replay_counts(n_old: int, stage: int) -> list[int]:
    """Replayed scenes of each earlier stage in a batch of stage ``stage`` with ``n_old`` of them: the same
    number from each (the first ones take the remainder), fixed per stage so that its batches keep one shape."""
    return [n_old // stage + (s < n_old % stage) for s in range(stage)]


class CurriculumSampler:
    """Batches of the current stage's training scenes mixed with earlier stages' (replay): from the stages'
    ``GraphStore`` (one gather of the union), or from their ``PaddedSplit`` on the device (one padded part per
    stage: a stage's batches have one shape)."""

    def __init__(self, stores: list[GraphStore], seed: int, padded: list[PaddedSplit] | None = None) -> None:
        self.union = GraphStore.concat(stores)
        self.offsets = [0]
        for store in stores:
            self.offsets.append(self.offsets[-1] + len(store))
        self.seed, self.padded = seed, padded

    def stage_ids(
        self, step: int, stage: int, batch_size: int, historical_fraction: float, rank: int = 0, world_size: int = 1
    ) -> list[tuple[int, torch.Tensor]]:
        """(stage, scene ids in that stage's split) of ``step``'s batch, current stage first: a pure function of
        seed and step; with several ranks, each takes every ``world_size``-th scene of every stage's part."""
        gen = stream(self.seed, "curriculum", step)
        n_old = round(batch_size * historical_fraction) if stage > 0 else 0
        counts = [(stage, batch_size - n_old)] + list(enumerate(replay_counts(n_old, stage)))
        parts = [
            (s, torch.randint(0, self.offsets[s + 1] - self.offsets[s], (n,), generator=gen))
            for s, n in counts
            if n > 0
        ]
        return [(s, ids[rank::world_size]) for s, ids in parts]

    def batch(
        self, step: int, stage: int, batch_size: int, historical_fraction: float, rank: int = 0, world_size: int = 1
    ) -> Batch:
        """The global batch of ``step``, or this rank's share of it."""
        parts = self.stage_ids(step, stage, batch_size, historical_fraction, rank, world_size)
        if self.padded is not None:
            return concat_batches([self.padded[s].gather(ids) for s, ids in parts])
        return self.union.gather(torch.cat([ids + self.offsets[s] for s, ids in parts]))
