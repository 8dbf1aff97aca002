"""Experience replay: a ring buffer of tensors, uniform or prioritized sampling, all batched.

The buffer lives on the training device when ``hardware.data_on_device`` allows
(no per-step host copy); on the host, each sampled batch is gathered into
page-locked memory (``hardware.pin_memory``) and copied with ``non_blocking``.
Prioritized replay (Schaul et al. 2016) keeps a sum-tree over priorities^alpha
as one tensor: updates and stratified sampling walk its levels for the whole
batch at once (log2(capacity) vectorised steps, no per-sample loop).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import torch

from uavgnn.envs.saved_state import check_tensors
from uavgnn.infrastructure.memory import check_fits


@dataclass
class Transitions:
    """A batch of multi-agent transitions (batch-major)."""

    obs: torch.Tensor  # (B, N, obs_dim)
    state: torch.Tensor  # (B, state_dim)
    action: torch.Tensor  # (B, N, action_dim)
    reward: torch.Tensor  # (B, N)
    next_obs: torch.Tensor  # (B, N, obs_dim); where done, the next episode's first: read only where not done
    next_state: torch.Tensor  # (B, state_dim); as next_obs
    done: torch.Tensor  # (B,) float: 1 where the episode ended
    weight: torch.Tensor  # (B,) importance weight (1 without prioritized replay)
    index: torch.Tensor  # (B,) buffer slots, for priority updates

    def to(self, device: torch.device, non_blocking: bool = False) -> Transitions:
        return Transitions(*(getattr(self, f.name).to(device, non_blocking=non_blocking) for f in fields(self)))

    def pin_memory(self) -> Transitions:
        return Transitions(*(getattr(self, f.name).pin_memory() for f in fields(self)))

    def __iter__(self):
        """(name, tensor) pairs, as a PyG batch iterates (for memory accounting)."""
        return ((f.name, getattr(self, f.name)) for f in fields(self))

    def __len__(self) -> int:
        return self.obs.shape[0]


STORED = ("obs", "state", "action", "reward", "next_obs", "next_state", "done")


class SumTree:
    """Priorities in a binary tree stored as one tensor (leaves at [size, 2 size)), batched updates and queries."""

    def __init__(self, capacity: int, device: torch.device) -> None:
        self.size = 1 << max(1, math.ceil(math.log2(capacity)))
        self.depth = int(math.log2(self.size))
        self.tree = torch.zeros(2 * self.size, device=device, dtype=torch.float64)

    def total(self) -> torch.Tensor:
        return self.tree[1]

    def update(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        node = index + self.size
        self.tree[node] = priority.to(self.tree.dtype)
        for _ in range(self.depth):  # recompute each touched parent from its two children, level by level
            node = node // 2  # repeated parents write the same sum: no unique() (a host sync on CUDA)
            self.tree[node] = self.tree[2 * node] + self.tree[2 * node + 1]

    def find(self, mass: torch.Tensor) -> torch.Tensor:
        """Leaf index whose prefix-sum interval contains each ``mass`` (0 <= mass < total)."""
        node = torch.ones_like(mass, dtype=torch.long)
        mass = mass.to(self.tree.dtype)
        for _ in range(self.depth):
            left = self.tree[2 * node]
            go_right = mass >= left
            mass = torch.where(go_right, mass - left, mass)
            node = 2 * node + go_right.long()
        return node - self.size


class ReplayBuffer:
    """Ring buffer of the last ``capacity`` transitions; ``prioritized`` turns on PER with (alpha, beta)."""

    def __init__(
        self,
        capacity: int,
        shapes: dict[str, tuple[int, ...]],
        device: torch.device,
        prioritized: bool = False,
        alpha: float = 0.6,
    ) -> None:
        floats = sum(math.prod(shapes[name]) for name in STORED) + (2 if prioritized else 0)  # + the sum-tree
        check_fits(
            f"algorithm.buffer_size={capacity}: a replay buffer of {capacity:,} transitions",
            4 * capacity * floats,
            "lower algorithm.buffer_size",
            device,
        )
        self.capacity, self.device, self.prioritized, self.alpha = capacity, device, prioritized, alpha
        self.data = {name: torch.zeros((capacity, *shapes[name]), device=device) for name in STORED}
        self.tree = SumTree(capacity, device) if prioritized else None
        self.max_priority = torch.ones((), device=device, dtype=torch.float64)  # a tensor: no host sync
        self.cursor, self.size = 0, 0

    def __len__(self) -> int:
        return self.size

    def add(self, **batch: torch.Tensor) -> None:
        """Append a batch of transitions (leading dimension = how many), overwriting the oldest."""
        n = batch["obs"].shape[0]
        if n > self.capacity:
            raise ValueError(f"cannot add {n} transitions at once to a buffer of {self.capacity}")
        slots = (self.cursor + torch.arange(n, device=self.device)) % self.capacity
        for name in STORED:
            self.data[name][slots] = (
                batch[name].to(self.device, self.data[name].dtype).reshape(n, *self.data[name].shape[1:])
            )
        if self.tree is not None:
            self.tree.update(slots, (self.max_priority**self.alpha).expand(n))
        self.cursor = (self.cursor + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator, beta: float = 0.4) -> Transitions:
        """``batch_size`` transitions: uniform, or proportional to priority with importance weights."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        if self.tree is None:
            index = torch.randint(0, self.size, (batch_size,), generator=generator, device=self.device)
            weight = torch.ones(batch_size, device=self.device)
        else:  # one uniform draw inside each of batch_size equal slices of the total priority
            total = self.tree.total()
            u = torch.rand(batch_size, generator=generator, device=self.device, dtype=torch.float64)
            mass = (torch.arange(batch_size, device=self.device) + u) * (total / batch_size)
            index = self.tree.find(mass.clamp(max=total * (1 - 1e-12))).clamp(max=self.size - 1)
            prob = self.tree.tree[index + self.tree.size] / total
            weight = (self.size * prob).pow(-beta)
            weight = (weight / weight.max()).float()
        return self.gather(index, weight)

    def gather(self, index: torch.Tensor, weight: torch.Tensor | None = None) -> Transitions:
        weight = torch.ones(index.shape[0], device=self.device) if weight is None else weight
        return Transitions(**{name: self.data[name][index] for name in STORED}, weight=weight, index=index)

    def update_priorities(self, index: torch.Tensor, error: torch.Tensor) -> None:
        """New priorities (|TD error| + eps) for sampled slots; no-op without prioritized replay."""
        if self.tree is None:
            return
        priority = error.detach().to(self.device).double().abs() + 1e-6
        self.max_priority = torch.maximum(self.max_priority, priority.max())
        self.tree.update(index.to(self.device), priority**self.alpha)

    def state_dict(self) -> dict[str, Any]:
        # the filled rows, copied: a slice would be saved with its whole storage (the buffer's full capacity)
        return {
            "data": {name: t[: self.size].cpu().clone() for name, t in self.data.items()},
            "cursor": self.cursor,
            "size": self.size,
            "max_priority": self.max_priority,
            "tree": self.tree.tree.cpu() if self.tree is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A saved buffer, checked first: counters within the capacity, every field of the saved size and
        finite (``check_tensors``)."""
        cursor, size = state["cursor"], state["size"]
        if not (isinstance(size, int) and 0 <= size <= self.capacity):
            raise ValueError(f"replay buffer: size {size!r} is outside 0..{self.capacity} (its capacity)")
        if not (isinstance(cursor, int) and 0 <= cursor < self.capacity and (size == self.capacity or cursor == size)):
            raise ValueError(f"replay buffer: cursor {cursor!r} does not fit size {size} and capacity {self.capacity}")
        check_tensors("replay buffer", state["data"], {name: (size, *t.shape[1:]) for name, t in self.data.items()})
        self.cursor, self.size = cursor, size
        self.max_priority = state["max_priority"].to(self.device)
        for name in STORED:
            self.data[name][: self.size] = state["data"][name].to(self.device)
        if self.tree is not None and state["tree"] is not None:
            self.tree.tree.copy_(state["tree"].to(self.device))
