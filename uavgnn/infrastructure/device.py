"""Where and how tensors run, for every mode: device, precision, autocast, compile, memory caps, seeds.

One rule per question, so training, evaluation, solving, profiling and the
benchmarks all agree: ``hardware.device`` (``auto`` = CUDA when present; under
``torchrun`` each CUDA rank gets ``cuda:LOCAL_RANK``), ``optim.amp`` with
``hardware.precision`` (always bf16 on the CPU), ``optim.compile`` with an
eager fallback, ``hardware.threads`` (``cpu_threads``) and ``hardware.memory_fraction``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import nn

from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.console import say_once
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.infrastructure.threads import apply_threads

Step = TypeVar("Step", bound=Callable)


def resolve_device(name: str) -> torch.device:
    """The preset's device; under ``torchrun`` a CUDA rank gets its own GPU (``cuda:LOCAL_RANK``). A GPU preset
    (``auto``) on a machine without one says, once, that it runs on the CPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
        if name == "cpu" and distributed.context().is_main:  # once for a run, not once a rank
            say_once(
                "hardware.device=auto: no CUDA device here, so the run goes on the CPU with this preset's "
                "batch and loader settings (hardware=cpu is the preset for a CPU)"
            )
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "hardware.device=cuda but no CUDA device is available "
            "(use hardware=cpu, or hardware.device=auto to fall back to the CPU)"
        )
    if name == "cuda":
        return torch.device("cuda", distributed.context().local_rank)
    return torch.device(name)


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
