"""Where and how tensors run, for every mode: device, precision, autocast, compile, memory caps, seeds.

One rule per question, so training, evaluation, solving, profiling and the
benchmarks all agree: ``hardware.device`` (``auto`` = CUDA when present; under
``torchrun`` each CUDA rank gets ``cuda:LOCAL_RANK``), ``optim.amp`` with
``hardware.precision`` (always bf16 on the CPU), ``optim.compile`` with an
eager fallback, ``hardware.threads`` (``cpu_threads``) and ``hardware.memory_fraction``.
"""

from __future__ import annotations

import logging
import os
import random
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from torch import nn

from uavgnn import distributed
from uavgnn.errors import ConfigError

Step = TypeVar("Step", bound=Callable)


_said: set[str] = set()


def say_once(message: str) -> None:
    """A warning a run gives once however often the code that finds it runs (the device is resolved in several
    places)."""
    if message not in _said:
        _said.add(message)
        logging.getLogger(__name__).warning(message)


def resolve_device(name: str) -> torch.device:
    """The preset's device; under ``torchrun`` a CUDA rank gets its own GPU (``cuda:LOCAL_RANK``). A GPU preset
    (``auto``) on a machine without one says, once, that it runs on the CPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
        if name == "cpu":
            say_once(
                "hardware.device=auto: no CUDA device here, so the run goes on the CPU with this preset's "
                "batch and loader settings (hardware=cpu is the preset for a CPU)"
            )
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("hardware.device=cuda but no CUDA device is available (use hardware=cpu or device=auto)")
    if name == "cuda":
        return torch.device("cuda", distributed.context().local_rank)
    return torch.device(name)


def available_cores() -> int:
    """The CPU cores this process may use: its affinity mask, capped by a cgroup v2 CPU quota (a container's
    ``--cpus``), and by ``OMP_NUM_THREADS`` when set (joblib's workers get cores / parallel jobs, torchrun's 1)."""
    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            cores = min(cores, max(1, int(float(quota) / float(period))))
    except (OSError, ValueError):
        pass
    omp = os.environ.get("OMP_NUM_THREADS", "")
    return min(cores, int(omp)) if omp.isdigit() and int(omp) > 0 else cores


def cpu_threads(setting: int) -> int:
    """Torch's intra-op threads for ``hardware.threads``: 0 means every core this process may use; any setting
    is capped there. Why 1 is the default: torch's OpenMP threads spin at a barrier after every parallel op, so
    two threads beside another busy process wait on each other for whole scheduler slices (the main job keeps
    ~20% of its speed beside one other 2-thread job, one thread ~70%: BENCHMARKS.md, threads under load)."""
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


def prepare_device(cfg) -> torch.device:
    """The preset's device with its CPU threads, (CUDA) memory cap and TF32 setting (``optim.tf32``) applied."""
    device = resolve_device(cfg.hardware.device)
    apply_threads(cfg.hardware.threads)
    if device.type == "cuda":
        torch.cuda.set_per_process_memory_fraction(cfg.hardware.memory_fraction, device)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = bool(cfg.optim.tf32)
    return device


def amp_dtype(cfg, device: torch.device) -> torch.dtype | None:
    """The autocast dtype (None = full precision): ``hardware.precision`` on CUDA, bf16 on the CPU."""
    if not cfg.optim.amp:
        return None
    if cfg.hardware.precision not in ("bf16", "fp16"):
        raise ConfigError(f"hardware.precision: expected bf16 or fp16, got {cfg.hardware.precision!r}")
    if device.type == "cpu":
        return torch.bfloat16  # CPU autocast is bf16
    return torch.bfloat16 if cfg.hardware.precision == "bf16" else torch.float16


def autocast(device: torch.device, dtype: torch.dtype | None, cache: bool = True) -> AbstractContextManager:
    """Autocast to ``dtype`` on ``device``, or nothing when ``dtype`` is None; ``cache=False`` inside a CUDA
    graph's capture (its cast weights must not outlive the region)."""
    return torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None, cache_enabled=cache)


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """``model`` in eval mode inside, back to the mode it had after (training stays training)."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside DDP / ``torch.compile`` wrappers (what holds the algorithm's own methods)."""
    while hasattr(model, "_orig_mod") or isinstance(model, nn.parallel.DistributedDataParallel):
        model = getattr(model, "_orig_mod", None) or model.module
    return model


def maybe_compile(step: Step, enabled: bool) -> Step:
    """``torch.compile(dynamic=True)`` of a training step (a module or a function: forward and loss, whose
    backward AOTAutograd compiles too) when enabled; any failure falls back to eager with a warning."""
    if not enabled:
        return step
    say_once(
        "optim.compile: the training step is compiled at its first call, which takes a while (about 2 min "
        "on a 2-core CPU) before the first step; optim.compile=false runs it eagerly"
    )
    try:
        return torch.compile(step, dynamic=True)
    except Exception as err:  # noqa: BLE001 - any compile failure falls back to eager
        message = f"optim.compile: torch.compile failed ({err}); running in eager mode"
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        return step


@dataclass(frozen=True)
class Loading:
    """How a run's training data reaches the device (the ``hardware`` group's loader keys, ``optim.prefetch``):
    what the data, environment and trajectory workloads read of the preset."""

    loader: str = "memory"  # memory (vectorised gather) | pyg (a torch DataLoader with the knobs below)
    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int = 2
    persistent_workers: bool = False
    data_on_device: str = "auto"  # keep_on_device's setting
    prefetch: bool = True  # prepare the next batch while the step runs
    max_batch_size: int = 4096  # the cap of hardware.batch_size=auto's trial batches


def keep_on_device(setting: str, device: torch.device, nbytes: int) -> bool:
    """``hardware.data_on_device``: true, false, or auto - on the CPU always (it is host memory), on a GPU when
    the data takes under a quarter of its free memory."""
    if setting != "auto":
        return setting == "true"
    return device.type == "cpu" or nbytes < 0.25 * torch.cuda.mem_get_info(device)[0]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@torch.no_grad()
def lerp_all_(targets: list[torch.Tensor], sources: list[torch.Tensor], weight: torch.Tensor) -> None:
    """``target <- target + weight (source - target)`` for every pair in one foreach op, ``weight`` a device
    scalar (``_foreach_lerp_`` with a scalar tensor would read it on the host: a sync)."""
    torch._foreach_lerp_(targets, sources, [weight] * len(targets))
