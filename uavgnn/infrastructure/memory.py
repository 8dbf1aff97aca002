"""Memory estimates checked before an allocation: a request that cannot fit is refused with its estimate and
the limit, in one line, instead of growing for minutes and dying (or taking the machine down with it).

``available_bytes`` is what the device can still give: on a GPU, CUDA's free memory plus what PyTorch's
allocator holds unused; on the host, the kernel's ``MemAvailable`` (cache it can drop included), capped by
the container's cgroup limit (less its usage, reclaimable file cache not counted as used) and by the process's
address-space limit (``ulimit -v``: ``RLIMIT_AS`` less the address space it already maps).
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

from uavgnn.infrastructure.errors import MemoryBudgetError

USABLE = 0.8  # of the available memory, what one allocation may take (the rest: Python, libraries, the OS)
CGROUP_FILES = (
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat"),
    (
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
        "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        "/sys/fs/cgroup/memory/memory.stat",
    ),
)  # cgroup v2, v1


def host_available_bytes() -> int:
    """Bytes the host can still give this process (``MemAvailable``, within the cgroup's limit and the
    process's address-space limit)."""
    available = min(_meminfo_available(), _address_space_left())
    for limit_file, usage_file, stat_file in CGROUP_FILES:
        try:
            limit, usage = Path(limit_file).read_text().strip(), Path(usage_file).read_text().strip()
        except OSError:
            continue
        if limit.isdigit() and usage.isdigit():
            used = int(usage) - _reclaimable(Path(stat_file))
            available = min(available, max(int(limit) - used, 0))
        break
    return available


def _address_space_left() -> int:
    """``RLIMIT_AS`` (``ulimit -v``) less the virtual memory this process maps already (``VmSize``); no limit:
    the largest int."""
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY:
        return 2**63 - 1
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return max(limit - int(line.split()[1]) * 1024, 0)
    except (OSError, ValueError, IndexError):
        pass
    return limit


def _reclaimable(stat_file: Path) -> int:
    """File cache a cgroup can drop (``inactive_file`` of its ``memory.stat``; 0 if unreadable)."""
    try:
        for line in stat_file.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key in ("inactive_file", "total_inactive_file") and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return 0


def _meminfo_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 2**63 - 1  # no way to know: refuse nothing


def available_bytes(device: object = "cpu") -> int:
    """Free memory of ``device`` (a torch device or its name): CUDA's free bytes, else the host's."""
    if str(device).startswith("cuda"):
        import torch

        device = torch.device(device)
        unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)  # the allocator's own
        return int(torch.cuda.mem_get_info(device)[0]) + unused
    return host_available_bytes()


def gigabytes(n: float) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**27 else f"{n / 2**20:.0f} MB"


def check_fits(what: str, need: float, fix: str, device: object = "cpu") -> None:
    """Refuse ``what`` (e.g. ``env.n_envs=100000000: the environments``) if its estimated ``need`` in bytes is
    more than ``USABLE`` of what ``device`` has available, naming both and ``fix``."""
    available = available_bytes(device)
    if need > USABLE * available:
        where = (
            f"on {device}" if str(device).startswith("cuda") else "to this process (free memory, its cgroup, ulimit -v)"
        )
        raise MemoryBudgetError(
            f"{what} would need about {gigabytes(need)} of memory, but {gigabytes(available)} "
            f"is available {where} (at most {USABLE:.0%} of it is used at once): {fix}"
        )
