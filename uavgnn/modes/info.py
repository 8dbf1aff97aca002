"""``mode=info``: the environment check to run before a long job.

Versions (Python, torch, PyG, CUDA, cuDNN), devices and their memory, CPU
threads, whether AMP and ``torch.compile`` actually work here (a tiny
forward/backward of the real model under each), a quick matmul and memory-copy
rate, and the hardware preset this machine should use. Prints a table and
writes ``info.json`` into the run directory.
"""

from __future__ import annotations

import os
import platform
import time
import traceback
from functools import partial
from pathlib import Path
from typing import Any

import torch

from uavgnn.algorithms.base import Algorithm
from uavgnn.algorithms.registry import algorithms
from uavgnn.config.schemas import Config
from uavgnn.infrastructure.console import command_line, echo
from uavgnn.infrastructure.storage import write_json
from uavgnn.reporting.tables import format_table
from uavgnn.runs.layout import INFO
from uavgnn.runs.manifest import cpu_model, package_versions

GIB = 2**30


def versions() -> dict[str, Any]:
    """Python, the packages of the run manifest, and CUDA's."""
    return {
        "python": platform.python_version(),
        **package_versions(),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
    }


def host_memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB


def devices() -> list[dict[str, Any]]:
    found = [
        {
            "device": "cpu",
            "name": cpu_model(),
            "memory_gib": host_memory_gib(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
        }
    ]
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        found.append(
            {
                "device": f"cuda:{i}",
                "name": props.name,
                "memory_gib": props.total_memory / GIB,
                "capability": f"{props.major}.{props.minor}",
                "multiprocessors": props.multi_processor_count,
            }
        )
    return found


def trial(what: str, call) -> dict[str, Any]:
    """Run ``call`` and report ok/failed with the time it took and the first line of any error."""
    start = time.perf_counter()
    try:
        call()
        return {"trial": what, "ok": True, "seconds": time.perf_counter() - start, "error": ""}
    except Exception as err:  # noqa: BLE001 - the point is to report what fails here
        last = traceback.format_exception_only(type(err), err)[-1].strip()
        return {"trial": what, "ok": False, "seconds": time.perf_counter() - start, "error": last[:200]}


def _tiny_step(device: torch.device, amp: torch.dtype | None = None, compiled: bool = False) -> None:
    """One forward/backward of a tiny real model on a generated batch."""
    from torch_geometric.data import Batch

    from uavgnn.infrastructure.device import autocast
    from uavgnn.models import TransformerGNN
    from uavgnn.models.policy import policy_log_probs
    from uavgnn.problem.generator import generate_scenes
    from uavgnn.problem.graphs import build_graph
    from uavgnn.problem.scenes import SceneDistribution

    batch = Batch.from_data_list([build_graph(s) for s in generate_scenes(SceneDistribution(), 8, 4, 0)]).to(device)
    model = TransformerGNN(hidden=32, heads=2, layers=1).to(device)
    runner = torch.compile(model, dynamic=True) if compiled else model
    with autocast(device, amp):
        cand_logp, idle_logp, _ = policy_log_probs(runner, batch, 8)
    (cand_logp.float().sum() + idle_logp.float().sum()).backward()


def _has_self_check(algorithm: type[Algorithm]) -> bool:
    """Whether an algorithm brings a check of its own (the base's does nothing)."""
    return algorithm.self_check.__func__ is not Algorithm.self_check.__func__


def rates(device: torch.device) -> dict[str, float]:
    """Matmul GFLOP/s (fp32 and bf16) and memory copy GB/s (host->device on CUDA, a host clone on CPU)."""
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        a = torch.randn(1024, 1024, device=device, dtype=dtype)
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            a @ a
            if device.type == "cuda":
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - start)
        out[f"matmul_{str(dtype).split('.')[-1]}_gflops"] = 2 * 1024**3 / best / 1e9
    host = torch.empty(64 * 2**20 // 4, dtype=torch.float32)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        if device.type == "cuda":
            host.pin_memory().to(device, non_blocking=True)
            torch.cuda.synchronize()
        else:
            host.clone()
        best = min(best, time.perf_counter() - start)
    out["copy_gb_per_s"] = host.numel() * 4 / best / 1e9
    return out


def recommend_preset(found: list[dict[str, Any]]) -> tuple[str, str]:
    """The hardware preset for this machine and why (GPU count and memory; see conf/hardware/)."""
    gpus = [d for d in found if d["device"].startswith("cuda")]
    if not gpus:
        return "cpu", "no CUDA device"
    if len(gpus) > 1:
        return "multi_gpu", f"{len(gpus)} GPUs: torchrun --nproc_per_node={len(gpus)} (docs/scaling-out.md)"
    memory = gpus[0]["memory_gib"]
    if memory <= 12:
        return "low_mem", f"one GPU with {memory:.0f} GiB"
    if memory < 40:
        return "mid_mem", f"one GPU with {memory:.0f} GiB"
    return "high_mem", f"one GPU with {memory:.0f} GiB"


def run_info(cfg: Config, out_dir: Path) -> dict[str, Any]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    found = devices()
    amp_dtype = torch.bfloat16 if device.type == "cpu" or torch.cuda.is_bf16_supported() else torch.float16
    trials = [
        trial(f"fp32 step on {device}", lambda: _tiny_step(device)),
        trial(f"AMP ({str(amp_dtype).split('.')[-1]}) step on {device}", lambda: _tiny_step(device, amp_dtype)),
        trial(f"torch.compile step on {device}", lambda: _tiny_step(device, compiled=True)),
        *(
            trial(f"algorithm={name}: its own update on {device}", partial(algorithm.self_check, device))
            for name, algorithm in algorithms().items()
            if _has_self_check(algorithm)
        ),
    ]
    preset, why = recommend_preset(found)
    info = {
        "versions": versions(),
        "devices": found,
        "trials": trials,
        "rates": rates(device),
        "recommended": {
            "hardware": preset,
            "why": why,
            "amp": trials[1]["ok"],
            "compile": trials[2]["ok"] and device.type == "cuda",
        },
    }
    echo(format_table([info["versions"]]))
    echo(format_table(found))
    echo(format_table(trials))
    echo(format_table([info["rates"]]))
    flags = (
        [f"hardware={preset}"]
        + ["optim.amp=true"] * info["recommended"]["amp"]
        + ["optim.compile=true"] * info["recommended"]["compile"]
    )
    echo(f"\nrecommended: {command_line(flags)}   ({why})")
    write_json(out_dir / INFO, info)
    return info
