"""Batches for training and evaluation: the in-memory gather loader or PyG's DataLoader.

``loader=memory`` (default) gathers each batch from the split's concatenated
tensors with vectorised indexing (see ``GraphStore.gather``): ~1 ms for 64
graphs of 16 UAVs against ~13 ms for PyG's per-graph collate, so it needs no
worker processes. ``loader=pyg`` is PyG's ``DataLoader`` configured from the
hardware preset (workers, pinned memory, prefetch, persistent workers) for
datasets that should not be materialised per batch in the main process.
Shuffling is seeded per epoch, so a resumed run sees the same batches, and
under ``torchrun`` each rank loads its shard of every global batch.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import torch
from torch.utils.data import Dataset, Sampler
from torch_geometric.data import Batch
from torch_geometric.loader import DataLoader

from uavgnn.data.padded import PaddedSplit
from uavgnn.data.store import GraphStore
from uavgnn.infrastructure.randomness import stream


class ShardedBatchSampler(Sampler[list[int]]):
    """Index batches of one epoch; under data parallelism each rank gets its slice of every global batch.

    The epoch's order is one seeded permutation shared by all ranks (``set_epoch``
    reshuffles, like ``DistributedSampler``); global batch ``t`` is
    ``perm[t*B:(t+1)*B]`` and rank ``r`` of ``W`` takes its ``r``-th ``B/W`` block.
    Every sample is seen once per epoch across ranks, and the union of the ranks'
    batches at a step is exactly the batch a single process would have seen, so
    a DDP run follows the single-process run step for step.
    """

    def __init__(
        self,
        size: int,
        batch_size: int,
        shuffle: bool,
        seed: int = 0,
        drop_last: bool = False,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if batch_size % world_size:
            raise ValueError(
                f"hardware.batch_size={batch_size} (the global batch) must be divisible by the "
                f"{world_size} processes of this run"
            )
        self.size, self.batch_size, self.shuffle, self.seed, self.drop_last = size, batch_size, shuffle, seed, drop_last
        self.rank, self.world_size = rank, world_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size // self.batch_size if self.drop_last else -(-self.size // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        ids = torch.arange(self.size)
        if self.shuffle:
            ids = ids[torch.randperm(self.size, generator=stream(self.seed, "scene_order", self.epoch))]
        per_rank = self.batch_size // self.world_size
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            block = ids[start : start + self.batch_size]
            shard = block[self.rank * per_rank : (self.rank + 1) * per_rank] if self.world_size > 1 else block
            yield shard.tolist()


class InMemoryLoader:
    """Batches of ``store`` by vectorised gather, in the order of ``batch_sampler``."""

    def __init__(
        self,
        store: GraphStore | PaddedSplit,
        batch_size: int,
        shuffle: bool,
        seed: int = 0,
        drop_last: bool = False,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.store = store
        self.batch_sampler = ShardedBatchSampler(len(store), batch_size, shuffle, seed, drop_last, rank, world_size)

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[Batch]:
        for ids in self.batch_sampler:
            yield self.store.gather(torch.tensor(ids, dtype=torch.long))


class StoreDataset(Dataset):
    """A ``GraphStore`` as a map-style dataset of PyG ``Data`` for PyG's ``DataLoader``."""

    def __init__(self, store: GraphStore) -> None:
        self.store = store

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, i: int):
        return self.store.get(int(i))


def make_loader(
    store: GraphStore | PaddedSplit,
    kind: str,
    batch_size: int,
    shuffle: bool,
    seed: int = 0,
    num_workers: int = 0,
    pin_memory: bool = False,
    prefetch_factor: int = 2,
    persistent_workers: bool = False,
    drop_last: bool = False,
    rank: int = 0,
    world_size: int = 1,
):
    """A loader of ``kind`` 'memory' or 'pyg' over ``store``; ``batch_size`` is the global batch, of which
    this rank loads its ``1/world_size`` share. Both kinds expose ``batch_sampler.set_epoch``."""
    if kind == "memory":
        return InMemoryLoader(store, batch_size, shuffle, seed, drop_last, rank, world_size)
    if kind == "pyg":
        sampler = ShardedBatchSampler(len(store), batch_size, shuffle, seed, drop_last, rank, world_size)
        extra = dict(prefetch_factor=prefetch_factor, persistent_workers=persistent_workers) if num_workers > 0 else {}
        return DataLoader(
            StoreDataset(store), batch_sampler=sampler, num_workers=num_workers, pin_memory=pin_memory, **extra
        )
    raise ValueError(f"hardware.loader: unknown loader {kind!r} (expected 'memory' or 'pyg')")


def prefetched(batches: Iterator[Batch], device: torch.device, pin_memory: bool, depth: int = 2) -> Iterator[Batch]:
    """Prepare the next batches in a background thread (gather, pin, non_blocking copy)
    while the current step runs."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()

    def work() -> None:
        try:
            for b in batches:
                if pin_memory and device.type == "cuda":
                    b = b.pin_memory()
                q.put(b.to(device, non_blocking=True))
        except BaseException as err:  # surfaced in the consumer
            q.put(err)
        q.put(done)

    threading.Thread(target=work, daemon=True).start()
    while (item := q.get()) is not done:
        if isinstance(item, BaseException):
            raise item
        yield item
