"""Measuring where time and memory go: device sync, peak memory, activation memory.

Activation memory is measured the same way on every device: the bytes of the
distinct tensors autograd saves for backward during a forward pass
(``torch.autograd.graph.saved_tensors_hooks``), parameters excluded. It is
what gradient checkpointing trades away and what grows with the batch, so
the auto batch size and the profile's recommendations use it on CPUs too,
where no allocator reports a per-step peak.
"""

from __future__ import annotations

import os
import resource

import torch
from torch import nn

MIB = 2**20


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so a wall-clock split between stages is honest."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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
