"""The batches of a curriculum's stages: a stage's batch size, and its scenes mixed with earlier stages'.

Batches are drawn with replacement from a seeded generator keyed by (seed, step), so a resumed run sees
exactly the batches it would have seen.
"""

from __future__ import annotations

import torch
from torch_geometric.data import Batch

from uavgnn.data.store import GraphStore
from uavgnn.randomness import stream


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


class CurriculumSampler:
    """Batches of the current stage's training scenes mixed with earlier stages' (replay)."""

    def __init__(self, stores: list[GraphStore], seed: int) -> None:
        self.union = GraphStore.concat(stores)
        self.offsets = [0]
        for store in stores:
            self.offsets.append(self.offsets[-1] + len(store))
        self.seed = seed

    def batch(self, step: int, stage: int, batch_size: int, historical_fraction: float, rank: int = 0,
              world_size: int = 1) -> Batch:
        """The global batch of ``step`` (a pure function of seed and step), or this rank's share of it."""
        gen = stream(self.seed, "curriculum", step)
        n_old = round(batch_size * historical_fraction) if stage > 0 else 0
        start, end = self.offsets[stage], self.offsets[stage + 1]
        current = start + torch.randint(0, end - start, (batch_size - n_old,), generator=gen)
        earlier = torch.randint(0, start, (n_old,), generator=gen) if n_old else current[:0]
        ids = torch.cat([current, earlier])
        if world_size > 1:
            ids = ids[torch.randperm(len(ids), generator=gen)]  # every rank gets its share of the replay
            per_rank = len(ids) // world_size
            ids = ids[rank * per_rank:(rank + 1) * per_rank]
        return self.union.gather(ids)
