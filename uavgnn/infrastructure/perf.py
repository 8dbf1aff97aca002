"""Measuring where time and memory go: device sync, peak memory, activation memory, the ops of a step,
what ``torch.compile`` made of it.

Activation memory is measured the same way on every device: the bytes of the
distinct tensors autograd saves for backward during a forward pass
(``torch.autograd.graph.saved_tensors_hooks``), parameters excluded. It is
what gradient checkpointing trades away and what grows with the batch, so
the auto batch size and the profile's recommendations use it on CPUs too,
where no allocator reports a per-step peak.
"""

from __future__ import annotations

import logging
import os
import resource
import statistics
import time
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode

MIB = 2**20


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so a wall-clock split between stages is honest."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(work: Callable[[], object], repeats: int, device: torch.device, warmup: int = 1) -> float:
    """Median wall time of ``repeats`` calls of ``work`` after ``warmup`` (the device synced around each): a
    benchmark's figure on a shared, noisy machine."""
    for _ in range(warmup):
        work()
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        work()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_memory_mb(device: torch.device) -> float:
    """CUDA: the allocator's peak; CPU: the process's peak resident set."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / MIB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def device_memory_mb(device: torch.device) -> float:
    """Total memory of the device (host RAM for the CPU)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory / MIB
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / MIB


def gpu_utilization(device: torch.device) -> float | None:
    """Percent of time the GPU was busy over the last sample period (NVML), when available."""
    if device.type != "cuda":
        return None
    try:
        return float(torch.cuda.utilization(device))
    except Exception:  # noqa: BLE001 - NVML (pynvml) is optional
        return None


def warn_if_near_capacity(peak_mb: float, device: torch.device) -> None:
    """A warning when a step's peak memory is above 80% of the device's: the next larger batch may not fit."""
    if peak_mb > 0.8 * device_memory_mb(device):
        logging.getLogger(__name__).warning(
            "peak memory %.0f MB is above 80%% of the device's %.0f MB: lower hardware.batch_size "
            "or enable optim.grad_checkpoint / optim.amp",
            peak_mb,
            device_memory_mb(device),
        )


class ActivationMeter:
    """``with ActivationMeter(model) as meter: loss = f(...)`` -> ``meter.bytes`` saved for backward."""

    def __init__(self, model: nn.Module) -> None:
        self._params = {p.data_ptr() for p in model.parameters()}
        self._seen: set[int] = set()
        self.bytes = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in self._params and ptr not in self._seen:
            self._seen.add(ptr)
            self.bytes += storage.nbytes()
        return tensor

    def __enter__(self) -> ActivationMeter:
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)

    @property
    def mb(self) -> float:
        return self.bytes / MIB


# aten ops that make the host wait for the device on a GPU: a value read back (``.item()``, ``bool()``), an
# output whose size depends on the data (``nonzero``, boolean-mask indexing, ``unique``, ``repeat_interleave``
# without ``output_size``)
SYNC_OPS = frozenset(
    {
        "aten::_local_scalar_dense",
        "aten::nonzero",
        "aten::masked_select",
        "aten::_unique2",
        "aten::unique_dim",
        "aten::unique_consecutive",
        "aten::is_nonzero",
        "aten::equal",
        "aten::repeat_interleave",
        "aten::item",
    }
)
_INDEXING = {"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"}
SYNC_OPS = SYNC_OPS | {f"{name}(boolean mask)" for name in _INDEXING}
_IN_OPTIMISER = [0]  # inside an optimiser's step: its step-count read is of a host tensor on CUDA (no sync)
register_optimizer_step_pre_hook(lambda *_: _IN_OPTIMISER.__setitem__(0, _IN_OPTIMISER[0] + 1))
register_optimizer_step_post_hook(lambda *_: _IN_OPTIMISER.__setitem__(0, _IN_OPTIMISER[0] - 1))


class OpCounter(TorchDispatchMode):
    """``with OpCounter() as count: step()`` -> ``count.ops`` (aten ops dispatched), ``count.views`` (those among
    them that only alias their input - ``view``, ``t``, ``detach``, ``expand``, slices: a dispatch each, no kernel)
    and ``count.syncs`` (those that make the host wait), with ``count.where`` the Python line that asked for each
    kind of sync (``trace_syncs``) and ``count.functions`` the ops each uavgnn function asked for, its callees' in
    uavgnn apart (``trace_ops``): what a GPU step's speed depends on, counted on any device. On a GPU each op that
    is not a view launches at least one kernel."""

    def __init__(self, trace_syncs: bool = False, trace_ops: bool = False) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self.where: Counter[str] = Counter()
        self.functions: Counter[str] = Counter()
        self.views = 0
        self.trace_syncs, self.trace_ops = trace_syncs, trace_ops

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = func._schema.name
        if name == "aten::_local_scalar_dense" and _IN_OPTIMISER[0] and args[0].dim() == 0 and args[0].is_cpu:
            name = "optimizer-step-count"
        elif name == "aten::repeat_interleave" and (kwargs or {}).get("output_size") is not None:
            name = "aten::repeat_interleave(output_size)"  # its size is given: nothing to read back
        elif name in _INDEXING and any(i is not None and i.dtype == torch.bool for i in args[1]):
            name = f"{name}(boolean mask)"  # the kernel counts the mask's true entries on the host first
        self.counts[name] += 1
        self.views += func.is_view
        if self.trace_ops or (self.trace_syncs and name in SYNC_OPS):
            frame = next(
                (
                    f
                    for f in reversed(traceback.extract_stack()[:-1])
                    if "/uavgnn/" in f.filename and not f.filename.endswith("perf.py")
                ),
                None,
            )
            module = frame.filename.split("/uavgnn/")[-1] if frame else ""
            if self.trace_syncs and name in SYNC_OPS:
                self.where[f"{name} at {module}:{frame.lineno}" if frame else name] += 1
            if self.trace_ops:
                self.functions[f"{module}:{frame.name}" if frame else "(outside uavgnn)"] += 1
        return func(*args, **(kwargs or {}))

    @property
    def ops(self) -> int:
        return sum(self.counts.values())

    @property
    def syncs(self) -> int:
        return sum(n for name, n in self.counts.items() if name in SYNC_OPS)


class CompileCounter:
    """``with CompileCounter() as c: run()`` -> ``c.compiles`` (frames TorchDynamo compiled: the first compile of
    each function and every recompile) and ``c.graph_breaks``: whether a compiled step stays one graph, compiled
    once per shape it meets (read from ``torch._dynamo``'s own counters)."""

    def __init__(self) -> None:
        self.compiles = self.graph_breaks = 0

    @staticmethod
    def _now() -> tuple[int, int]:
        from torch._dynamo.utils import counters

        return counters["frames"]["total"], sum(counters["graph_break"].values())

    def __enter__(self) -> CompileCounter:
        self._start = self._now()
        return self

    def __exit__(self, *exc) -> None:
        end = self._now()
        self.compiles, self.graph_breaks = end[0] - self._start[0], end[1] - self._start[1]
