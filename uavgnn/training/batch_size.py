"""``hardware.batch_size=auto``: the largest power-of-two batch whose training step fits the memory budget.

Trial steps (forward + backward of the real model on real batches of the
training split) at 8, 16, 32, ... graphs, up to ``cap``. A trial "fits" when
its step memory is within ``hardware.memory_fraction`` of the budget
(``hardware.memory_limit_mb``, or the device's memory when 0):

- CUDA: the allocator's peak during the step (``max_memory_allocated``); an
  out-of-memory error ends the search;
- CPU: parameters, gradients and AdamW's two moments, plus the batch's tensors
  and the activations saved for backward (``ActivationMeter``).

A fixed ``hardware.batch_size`` above ``ESTIMATE_ABOVE`` is checked the same way before the first batch is
drawn: two trial steps give the memory of one more item, and a batch that could not fit the memory this
process has (``uavgnn.infrastructure.memory``) is refused in one line instead of allocating until the machine gives out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from uavgnn.algorithms.base import LossOf
from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.errors import ConfigError, MemoryBudgetError
from uavgnn.infrastructure.memory import check_fits
from uavgnn.infrastructure.perf import MIB, ActivationMeter, device_memory_mb

log = logging.getLogger(__name__)
SMALLEST = 8
ESTIMATE_ABOVE = 4096  # a fixed batch larger than this is estimated before it is drawn (the auto search's cap)


def step_memory_mb(model: nn.Module, loss_of: LossOf, store: Any, batch_size: int, device: torch.device) -> float:
    """Memory one training step (``loss_of``: the algorithm's own) of ``batch_size`` items of ``store`` (``gather``,
    ``len``) needs on ``device``."""
    ids = torch.arange(batch_size) % len(store)
    batch = store.gather(ids).to(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    with ActivationMeter(model) as meter:
        loss = loss_of(model, batch)
    loss.backward()
    model.zero_grad(set_to_none=True)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    if device.type == "cuda":
        return (torch.cuda.max_memory_allocated(device) - base + 3 * params) / MIB  # + grads and AdamW moments
    batch_bytes = sum(v.numel() * v.element_size() for _, v in batch if torch.is_tensor(v))
    return (4 * params + batch_bytes + meter.bytes) / MIB


def find_batch_size(
    model: nn.Module,
    loss_of: LossOf,
    store: Any,
    device: torch.device,
    memory_fraction: float,
    memory_limit_mb: float = 0.0,
    cap: int = 4096,
) -> int:
    """The largest power-of-two batch (``SMALLEST`` .. ``cap``, at most the split's size) that fits."""
    budget = memory_fraction * (memory_limit_mb or device_memory_mb(device))
    cap = min(cap, len(store))
    chosen, size = 0, SMALLEST
    while size <= cap:
        try:
            need = step_memory_mb(model, loss_of, store, size, device)
        except torch.cuda.OutOfMemoryError:
            model.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            log.info("auto batch size: %d graphs ran out of memory", size)
            break
        log.info("auto batch size: %d graphs need %.0f MB of %.0f MB", size, need, budget)
        if need > budget:
            break
        chosen, size = size, size * 2
    if chosen == 0:
        raise MemoryBudgetError(
            f"hardware.batch_size=auto: even {SMALLEST} graphs need more than the budget of "
            f"{budget:.0f} MB (hardware.memory_fraction={memory_fraction}, "
            f"hardware.memory_limit_mb={memory_limit_mb}); use a smaller model or more memory"
        )
    return chosen


def resolve_batch_size(
    cfg, model: torch.nn.Module, loss_of: LossOf, store_of: Callable[[], Any], device: torch.device
) -> int:
    """``hardware.batch_size``, or under ``auto`` the largest that fits (rank 0's choice x world size).
    ``store_of`` gives the trial items (``gather(ids)``, ``len``); called under ``auto`` and for a fixed batch
    above ``ESTIMATE_ABOVE`` (``check_batch_fits``)."""
    if cfg.hardware.batch_size != "auto":
        size = int(cfg.hardware.batch_size)
        if size > ESTIMATE_ABOVE:
            check_batch_fits(size, model, loss_of, store_of, device)
        return size
    found = find_batch_size(
        model,
        loss_of,
        store_of(),
        device,
        cfg.hardware.memory_fraction,
        cfg.hardware.memory_limit_mb,
        cfg.hardware.max_batch_size,
    )
    found = distributed.broadcast_from_main(found) * distributed.context().world_size
    log.info("hardware.batch_size=auto: %d graphs per step", found)
    return found


def check_batch_fits(
    size: int, model: nn.Module, loss_of: LossOf, store_of: Callable[[], Any], device: torch.device
) -> None:
    """Refuse a fixed ``hardware.batch_size`` whose training step cannot fit: its memory extrapolated from
    trial steps of ``SMALLEST`` and twice as many items (each rank's share of the global batch)."""
    try:
        store = store_of()
    except ConfigError:
        return  # no trial items (on-policy episodes): their environments are estimated where they are made
    small = step_memory_mb(model, loss_of, store, SMALLEST, device)
    per_item = max(step_memory_mb(model, loss_of, store, 2 * SMALLEST, device) - small, 0.0) / SMALLEST
    share = -(-size // distributed.context().world_size)
    check_fits(
        f"hardware.batch_size={size}: a training step of {share:,} items",
        (small + per_item * (share - SMALLEST)) * MIB,
        "lower hardware.batch_size, or hardware.batch_size=auto picks the largest that fits",
        device,
    )
