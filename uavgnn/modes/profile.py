"""``mode=profile``: where a training step's time and memory go, and what to change.

Runs ``profile.warmup`` + ``profile.steps`` training steps of the configured
algorithm (its own ``training_step``, on its own data: those that train on a dataset, not on experience they
collect), model, preset and toggles, timing each stage with the device synchronised at
its borders: data wait (gather), host-to-device copy, forward (incl. loss),
backward, optimizer step; plus the validation decode, amortised over
``train.eval_every`` steps; and the step's anatomy (``uavgnn.training.anatomy``:
aten ops and host-sync ops per training step, counted over ``profile.steps``
steps of a real run under ``anatomy/``), what decides a GPU step's speed.
Reports ms/step and share per stage, throughput,
peak memory (RSS; on CUDA the allocator peak and NVML utilisation), the
activation memory of a step, the bottleneck stage and recommendations derived
from these numbers. ``profile.torch_profiler=true`` also writes a PyTorch
profiler trace (TensorBoard's trace handler) under ``profiler/``.
Writes ``profile.json`` and ``profile.png`` into the run directory.
"""

from __future__ import annotations

import contextlib
import logging
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, record_function, schedule, tensorboard_trace_handler

from uavgnn.algorithms.base import LossOf, Network, step_loss
from uavgnn.algorithms.registry import make_algorithm
from uavgnn.config.schemas import Config
from uavgnn.infrastructure.console import echo, progress
from uavgnn.infrastructure.device import amp_dtype, maybe_compile, prepare_device
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.infrastructure.perf import ActivationMeter, device_memory_mb, gpu_utilization, peak_memory_mb, synchronize
from uavgnn.infrastructure.storage import write_json
from uavgnn.loggers import publish
from uavgnn.reporting.pictures import plot_profile
from uavgnn.reporting.tables import format_table
from uavgnn.runs.layout import PROFILE, PROFILE_PICTURE
from uavgnn.training.anatomy import step_anatomy
from uavgnn.training.batch_size import resolve_batch_size
from uavgnn.training.optimisers import Optimisers

log = logging.getLogger(__name__)
STAGES = ("data_wait", "h2d_copy", "forward", "backward", "optimizer", "eval_decode")


def recommendations(
    share: dict[str, float], activation_frac: float, device: torch.device, cfg: Config, mem_frac: float
) -> list[str]:
    """Concrete advice from the measured shares (each rule names the number that triggered it)."""
    tips = []
    if share["data_wait"] > 0.10:
        tips.append(
            f"data wait {share['data_wait']:.0%} of the step: use hardware.loader=memory (vectorised "
            "in-memory gather) or raise hardware.num_workers"
            + (" and optim.prefetch=true" if device.type == "cuda" else "")
        )
    if share["h2d_copy"] > 0.10:
        tips.append(
            f"host-to-device copy {share['h2d_copy']:.0%}: set hardware.pin_memory=true and "
            "optim.prefetch=true (copies overlap the step)"
        )
    if share["forward"] + share["backward"] > 0.5 and not cfg.optim.amp:
        tips.append(
            f"forward+backward {share['forward'] + share['backward']:.0%}: try optim.amp=true "
            f"({'bf16 autocast on CPU' if device.type == 'cpu' else 'mixed precision'})"
        )
    if share["forward"] + share["backward"] > 0.5 and not cfg.optim.compile and device.type == "cuda":
        tips.append("compute-bound on CUDA: try optim.compile=true")
    if share["optimizer"] > 0.15:
        tips.append(
            f"optimizer step {share['optimizer']:.0%}: the model is small for the batch; raise "
            "hardware.batch_size (or batch_size=auto)"
        )
    if share["eval_decode"] > 0.15:
        tips.append(f"evaluation {share['eval_decode']:.0%} of training time: raise train.eval_every")
    if activation_frac > 0.5 and not cfg.optim.grad_checkpoint:
        tips.append(
            f"activation memory {activation_frac:.0%} of peak: enable optim.grad_checkpoint=true "
            "(or a subset: optim.checkpoint_layers=[0])"
        )
    if mem_frac > 0.8:
        tips.append(
            f"peak memory {mem_frac:.0%} of the device: lower hardware.batch_size or enable optim.grad_checkpoint"
        )
    if mem_frac < 0.3 and cfg.hardware.batch_size != "auto":
        tips.append(
            f"peak memory only {mem_frac:.0%} of the device: hardware.batch_size=auto finds the largest batch that fits"
        )
    return tips or ["no stage stands out: the step is balanced for this preset"]


@dataclass
class Profiled:
    """What the stage timer runs: the configured model and loss, its batches (host or device), a validation."""

    model: torch.nn.Module
    networks: list[Network]  # what the optimisers step, each with its LR multiple and clip
    loss_of: LossOf
    batches: Iterator[Any]
    batch_size: int
    eval_seconds: Callable[[], float]  # one validation pass, timed
    unit: str  # what a batch holds: graphs | samples


def setup(cfg: Config, device: torch.device, dtype: torch.dtype | None) -> Profiled:
    """The configured algorithm's model, loss and training batches (before their copy), as training has them."""
    algorithm = make_algorithm(cfg, device)
    if algorithm.cadence().updates:
        raise ConfigError(
            f"mode=profile times steps on a fixed dataset; algorithm={cfg.algorithm.name} collects "
            f"experience as it trains: time it with {algorithm.timed_by}"
        )
    torch.manual_seed(cfg.seed)
    model = algorithm.build_model(cfg).to(device)
    work = algorithm.workload(model)
    loss_of = step_loss(algorithm, device, dtype)
    batch_size = resolve_batch_size(cfg, model, loss_of, work.probe_store, device)

    def eval_seconds() -> float:
        start = time.perf_counter()
        work.validate(model, 0, dtype)
        return time.perf_counter() - start

    return Profiled(
        model, algorithm.networks(model), loss_of, work.host_batches(0, batch_size), batch_size, eval_seconds, work.unit
    )


def run_profile(cfg: Config, out_dir: Path) -> dict[str, Any]:
    """Time the configured algorithm's training step stage by stage, then report and plot."""
    device = prepare_device(cfg)
    dtype = amp_dtype(cfg, device)
    profiled = setup(cfg, device, dtype)
    times, activation_mb = time_stages(cfg, profiled, device, out_dir)
    ms = {stage: 1000 * statistics.median(v) for stage, v in times.items()}
    # one validation every eval_every steps, spread over those steps
    ms["eval_decode"] = 1000 * profiled.eval_seconds() / cfg.train.eval_every
    report = profile_report(cfg, device, ms, profiled, activation_mb, out_dir)
    anatomy = step_anatomy(cfg, out_dir / "anatomy", warmup=cfg.profile.warmup, steps=cfg.profile.steps)
    report.update(
        aten_ops_per_step=anatomy.ops_per_step,
        view_ops_per_step=anatomy.views_per_step,
        sync_ops_per_step=anatomy.syncs_per_step,
        compiles=anatomy.compiles,
        graph_breaks=anatomy.graph_breaks,
    )
    echo(
        f"step anatomy: {anatomy.ops_per_step:.0f} aten ops per step ({anatomy.views_per_step:.0f} of them views; "
        "on a GPU each other one launches a kernel), "
        f"{anatomy.syncs_per_step:.1f} host syncs per step"
        + (f", {anatomy.compiles} compiles, {anatomy.graph_breaks} graph breaks" if cfg.optim.compile else "")
    )
    write_json(out_dir / PROFILE, report)
    plot_profile(report, out_dir / PROFILE_PICTURE)
    headline = {key: value for key, value in report.items() if isinstance(value, (int, float, str))}
    publish(cfg, out_dir, {"profile/stages": report["stages"]}, {"profile/plot": out_dir / PROFILE_PICTURE}, headline)
    echo(f"wrote {out_dir / PROFILE} and {out_dir / PROFILE_PICTURE}")
    return report


def time_stages(
    cfg: Config, setup: Profiled, device: torch.device, out_dir: Path
) -> tuple[dict[str, list[float]], float]:
    """Seconds per stage of each measured step (after ``profile.warmup``) and the activation MB of a step."""
    model, loss_of, batches = setup.model, setup.loss_of, setup.batches
    optimisers = Optimisers(setup.networks, cfg.train.lr, cfg.train.weight_decay, cfg.train.grad_clip)
    scaler = torch.amp.GradScaler("cuda", enabled=amp_dtype(cfg, device) == torch.float16)
    loss_of = maybe_compile(loss_of, cfg.optim.compile)  # the step's forward and loss, as the trainer compiles it

    times: dict[str, list[float]] = {s: [] for s in STAGES[:-1]}
    activation_mb = 0.0
    profiler = contextlib.nullcontext()
    if cfg.profile.torch_profiler:
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        profiler = torch.profiler.profile(
            activities=activities,
            schedule=schedule(wait=1, warmup=1, active=min(5, cfg.profile.steps), repeat=1),
            on_trace_ready=tensorboard_trace_handler(str(out_dir / "profiler")),
            record_shapes=True,
            profile_memory=True,
        )
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    model.train()
    with profiler as prof:
        for step in progress(range(cfg.profile.warmup + cfg.profile.steps), desc="profile", unit="step"):
            marks = [time.perf_counter()]
            with record_function("data_wait"):
                batch = next(batches)
            marks.append(time.perf_counter())
            with record_function("h2d_copy"):
                batch = batch.to(device, non_blocking=True)
                synchronize(device)
            marks.append(time.perf_counter())
            # saved-tensor hooks slow the forward: activations are counted in the first (warm-up) step only
            meter = ActivationMeter(model) if step == 0 else contextlib.nullcontext()
            with record_function("forward"), meter:
                loss = loss_of(model, batch)
                synchronize(device)
            marks.append(time.perf_counter())
            with record_function("backward"):
                optimisers.zero_grad()
                optimisers.backward(scaler.scale(loss))  # as the training step does
                synchronize(device)
            marks.append(time.perf_counter())
            with record_function("optimizer"):
                optimisers.step(scaler)
                synchronize(device)
            marks.append(time.perf_counter())
            if step == 0:
                activation_mb = meter.mb
            if step >= cfg.profile.warmup:
                for stage, start, end in zip(STAGES, marks, marks[1:]):
                    times[stage].append(end - start)
            if cfg.profile.torch_profiler:
                prof.step()
    return times, activation_mb


def profile_report(
    cfg: Config, device: torch.device, ms: dict[str, float], setup: Profiled, activation_mb: float, out_dir: Path
) -> dict[str, Any]:
    """The stage shares, throughput, memory, bottleneck and advice, printed and returned."""
    batch_size, unit = setup.batch_size, setup.unit
    step_ms = sum(ms.values())
    share = {stage: ms[stage] / step_ms for stage in STAGES}
    bottleneck = max(STAGES, key=share.get)
    peak = peak_memory_mb(device)
    mem_frac = peak / device_memory_mb(device)
    report = {
        "device": str(device),
        "model": cfg.model.name,
        "algorithm": cfg.algorithm.name,
        "batch_size": batch_size,
        "steps": cfg.profile.steps,
        "amp": cfg.optim.amp,
        "compile": cfg.optim.compile,
        "grad_checkpoint": cfg.optim.grad_checkpoint,
        "loader": cfg.hardware.loader,
        "stages": [{"stage": s, "ms_per_step": ms[s], "share": share[s]} for s in STAGES],
        "step_ms": step_ms,
        "unit": unit,
        f"{unit}_per_s": 1000 * batch_size / step_ms,
        f"train_{unit}_per_s": 1000 * batch_size / (step_ms - ms["eval_decode"]),
        "peak_memory_mb": peak,
        "device_memory_mb": device_memory_mb(device),
        "activation_memory_mb": activation_mb,
        "gpu_utilization_pct": gpu_utilization(device),
        "bottleneck": bottleneck,
        "recommendations": recommendations(share, activation_mb / peak, device, cfg, mem_frac),
    }
    if cfg.profile.torch_profiler:
        report["torch_profiler_trace"] = str(out_dir / "profiler")
    echo(format_table(report["stages"]))
    if unit == "graphs":
        report["uavs_per_s"] = report["graphs_per_s"] * cfg.data.n_uav
    echo(
        f"\n{report[f'{unit}_per_s']:.0f} {unit}/s at batch {batch_size} ({cfg.algorithm.name}); "
        f"peak memory {peak:.0f} MB ({mem_frac:.0%} of {device}), "
        f"activations {activation_mb:.0f} MB per step"
    )
    echo(f"bottleneck: {bottleneck} ({share[bottleneck]:.0%} of the step)")
    for tip in report["recommendations"]:
        echo(f"- {tip}")
    return report
