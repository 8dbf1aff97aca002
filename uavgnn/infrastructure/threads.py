"""CPU threads: how many cores this process may really use, and torch's threads set to fit them."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

CPU_QUOTA = Path("/sys/fs/cgroup/cpu.max")  # a cgroup v2 CPU quota: "<quota> <period>" (or "max ...": none)


def available_cores(cpu_quota: Path | None = None) -> int:
    """The CPU cores this process may use: its affinity mask, capped by a cgroup v2 CPU quota (a container's
    ``--cpus``; ``cpu_quota``: the file to read, ``CPU_QUOTA`` by default), and by ``OMP_NUM_THREADS`` when set
    (joblib's workers get cores / parallel jobs, torchrun's 1)."""
    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = (cpu_quota or CPU_QUOTA).read_text().split()
        if quota != "max":
            cores = min(cores, max(1, int(float(quota) / float(period))))
    except (OSError, ValueError):
        pass
    omp = os.environ.get("OMP_NUM_THREADS", "")
    return min(cores, int(omp)) if omp.isdigit() and int(omp) > 0 else cores


def cpu_threads(setting: int) -> int:
    """Torch's intra-op threads for ``hardware.threads``: 0 means every core this process may use; any setting
    is capped there. Why 1 is the default: torch's OpenMP threads spin at a barrier after every parallel op, so
    two threads beside another busy process wait on each other for whole scheduler slices, where one thread
    keeps most of its speed (BENCHMARKS.md, threads under load)."""
    return min(setting, available_cores()) if setting > 0 else available_cores()


_LOWERED: set[int] = set()  # settings already said to be lowered


def apply_threads(setting: int) -> int:
    """Set torch's CPU threads for ``hardware.threads`` (before the run records them) and return the count;
    a setting above the cores this process may use is lowered, once, with a note."""
    threads = cpu_threads(setting)
    if setting > threads and setting not in _LOWERED:
        _LOWERED.add(setting)
        logging.getLogger(__name__).warning(
            "hardware.threads=%d: this process may use %d cores, so %d threads", setting, threads, threads
        )
    torch.set_num_threads(threads)
    return threads
