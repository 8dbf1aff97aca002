"""The training loop, readable top to bottom: imitation of the MILP's assignments.

One step: gather a batch, truncate candidates to the jittered k, score every
UAV's choices in one forward pass, minimise the NLL of the MILP's choices,
clip, step, update the moving average of the weights (the policy that is
evaluated and shipped: it smooths the step-to-step noise of the decoded gap). Every ``eval_every`` steps the greedy-decoded policy is scored on
the fixed validation set against the MILP labels; ``last.pt`` (and ``best.pt``
on improvement) hold everything needed to continue with no lost or repeated
step. Non-finite losses are skipped with the LR halved; after ``max_bad_steps``
in a row, or weights that blew up, training rolls back to ``last.pt`` (only
ever written with healthy weights) with the LR lowered tenfold, and stops with
a clear message when ``max_rollbacks`` are spent. SIGINT/SIGTERM stop the run
at the end of the step with ``last.pt`` written (``Interrupted``).

Under ``torchrun`` the model is wrapped in ``DistributedDataParallel``; each
rank trains on its shard of every global batch, and only rank 0 evaluates,
logs and writes checkpoints (the validation result is broadcast so every rank
takes the same decisions).
"""

from __future__ import annotations

import logging
import math
import random
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from tqdm import tqdm

from uavgnn import distributed
from uavgnn.config import scene_distribution
from uavgnn.console import echo
from uavgnn.data.loader import make_loader, prefetched
from uavgnn.data.splits import load_split
from uavgnn.errors import ConfigError, Interrupted, TrainingDiverged
from uavgnn.graphs import adaptive_k
from uavgnn.loggers import MetricLogger
from uavgnn.metrics import mean_metrics
from uavgnn.models import TransformerGNN, model_from_config
from uavgnn.perf import device_memory_mb, peak_memory_mb
from uavgnn.training.batch_size import find_batch_size
from uavgnn.training.checkpoint import (BEST, LAST, load_checkpoint, rng_state, save_checkpoint, set_rng_state,
                                       weights_norm, weights_problem)
from uavgnn.training.curriculum import FALLBACK, CurriculumSampler, CurriculumState, stage_batch_size, update_curriculum
from uavgnn.training.evaluate import batch_imitation_loss, evaluate_model
from uavgnn.training.reinforce import reinforce_loss
from uavgnn.training.stop import StopRequest

log = logging.getLogger(__name__)


@dataclass
class TrainState:
    """Counters that must survive a resume (saved in every checkpoint)."""

    step: int = 0
    lr_scale: float = 1.0  # lowered by plateaus and non-finite losses
    best_gap: float = math.inf
    evals_without_improvement: int = 0
    bad_steps: int = 0
    rollbacks: int = 0  # returns to the last good checkpoint after a divergence
    batch_size: int = 0  # the global batch in use (chosen by batch_size=auto, halved on CUDA OOM); 0 = not set
    curriculum: dict[str, Any] = field(default_factory=dict)


def resolve_device(name: str) -> torch.device:
    """The preset's device; under ``torchrun`` a CUDA rank gets its own GPU (``cuda:LOCAL_RANK``)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("hardware.device=cuda but no CUDA device is available (use hardware=cpu or device=auto)")
    if name == "cuda":
        return torch.device("cuda", distributed.context().local_rank)
    return torch.device(name)


def amp_dtype(cfg, device: torch.device) -> torch.dtype | None:
    if not cfg.optim.amp:
        return None
    if cfg.hardware.precision not in ("bf16", "fp16"):
        raise ValueError(f"hardware.precision: expected bf16 or fp16, got {cfg.hardware.precision!r}")
    if device.type == "cpu":
        return torch.bfloat16  # CPU autocast is bf16
    return torch.bfloat16 if cfg.hardware.precision == "bf16" else torch.float16


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def lr_factor(step: int, total: int, warmup: int, schedule: str) -> float:
    """Linear warmup, then cosine to 5% (``cosine``) or flat (``plateau``: lowered on evaluations)."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "cosine":
        progress = (step - warmup) / max(1, total - warmup)
        return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    if schedule == "plateau":
        return 1.0
    raise ValueError(f"train.schedule: unknown schedule {schedule!r} (expected cosine or plateau)")


def jittered_k(base: int, jitter: int, seed: int, step: int, k_max: int) -> int:
    """Training-time k: ``base +- jitter``, a pure function of (seed, step) so a resumed run repeats it."""
    if jitter == 0:
        return base
    offset = int(np.random.default_rng([seed, step]).integers(-jitter, jitter + 1))
    return int(min(max(1, base + offset), k_max))


def maybe_compile(model: TransformerGNN, enabled: bool):
    if not enabled:
        return model
    try:
        return torch.compile(model, dynamic=True)
    except Exception as err:  # noqa: BLE001 - any compile failure falls back to eager
        warnings.warn(f"optim.compile: torch.compile failed ({err}); training in eager mode", RuntimeWarning)
        return model


@dataclass
class TrainResult:
    model: TransformerGNN
    state: TrainState
    best_path: Path
    last_path: Path
    val: dict[str, float]
    perf: dict[str, float]  # median perf/graphs_per_s of the run and its peak memory


def prepare_device(cfg) -> torch.device:
    """The preset's device with its CPU threads and (CUDA) memory cap applied."""
    device = resolve_device(cfg.hardware.device)
    if cfg.hardware.threads > 0:
        torch.set_num_threads(cfg.hardware.threads)
    if device.type == "cuda":
        torch.cuda.set_per_process_memory_fraction(cfg.hardware.memory_fraction, device)
    return device


def resolve_batch_size(cfg, model: TransformerGNN, store, k: int, device: torch.device,
                       dtype: torch.dtype | None) -> int:
    """``hardware.batch_size``, or under ``auto`` the largest that fits (rank 0's choice x world size)."""
    if cfg.hardware.batch_size != "auto":
        return int(cfg.hardware.batch_size)
    found = find_batch_size(model, store, k, device, cfg.hardware.memory_fraction, cfg.hardware.memory_limit_mb,
                            cfg.hardware.max_batch_size, dtype)
    found = distributed.broadcast_from_main(found) * distributed.context().world_size
    log.info("hardware.batch_size=auto: %d graphs per step", found)
    return found


def load_initial_policy(model: TransformerGNN, path: str, model_cfg, device: torch.device) -> None:
    """Start from a checkpoint's policy (``trainer.init_from``), e.g. imitation weights to fine-tune."""
    ckpt = load_checkpoint(Path(path), device)
    stored = ckpt["config"]["model"]
    differ = [f"model.{key}={model_cfg[key]} (checkpoint: {stored[key]})"
              for key in ("hidden", "heads", "layers", "ffn_mult") if stored[key] != model_cfg[key]]
    if differ:
        raise ConfigError(f"trainer.init_from={path} was trained with another architecture: {', '.join(differ)}; "
                          f"use model={stored['name']}")
    model.load_state_dict(ckpt["policy"])
    log.info("trainer.init_from: starting from the policy of %s", path)


def train(cfg, out_dir: Path, logger: MetricLogger, resume_from: Path | None = None) -> TrainResult:
    device = prepare_device(cfg)
    seed_everything(cfg.seed)
    dtype = amp_dtype(cfg, device)
    ctx = distributed.context()

    model = model_from_config(cfg.model, cfg.optim.grad_checkpoint, cfg.optim.checkpoint_layers).to(device)
    if cfg.trainer.init_from and resume_from is None:  # before the data: a mismatch fails before any labelling
        load_initial_policy(model, cfg.trainer.init_from, cfg.model, device)
    sizes = list(cfg.curriculum.stages) if cfg.curriculum.name != "none" else [cfg.data.n_uav]
    with distributed.main_rank_first():  # one split per curriculum stage (just data.n_uav without one)
        stage_train = [load_split(cfg, "train", n_uav=n) for n in sizes]
        stage_val = [load_split(cfg, "val", n_uav=n) for n in sizes]
    train_store = stage_train[-1]
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
    ema = (AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(cfg.train.ema_decay))
           if cfg.train.ema_decay > 0 else None)
    policy = ema.module if ema is not None else model  # the weights evaluated, checkpointed as best and shipped
    state = TrainState()
    cur_state = CurriculumState()

    def restore(path: Path) -> None:
        """Everything a checkpoint holds: weights, optimiser, counters, RNG (resume and rollback)."""
        nonlocal state, cur_state
        ckpt = load_checkpoint(path, device)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scaler.load_state_dict(ckpt["scaler"])
        if ema is not None:
            ema.load_state_dict(ckpt["ema"])
        state = TrainState(**ckpt["state"])
        cur_state = CurriculumState(**state.curriculum)
        set_rng_state(ckpt["rng"])

    if resume_from is not None:
        restore(resume_from)
        log.info("resumed from %s at step %d", resume_from, state.step)
    good_norm = weights_norm(model)  # of the last healthy checkpoint (or the start): what "exploded" is measured by
    n_params = model.num_parameters()
    log.info("model %s: %s parameters", cfg.model.name, f"{n_params:,}")
    # DDP broadcasts rank 0's weights at construction and averages gradients in backward.
    ddp = torch.nn.parallel.DistributedDataParallel(model) if ctx.enabled else model
    runner = maybe_compile(ddp, cfg.optim.compile)

    def checkpoint(path: Path) -> bool:
        """Write ``path`` if the weights are healthy (same verdict on every rank); False if they are not."""
        nonlocal good_norm
        if weights_problem(model, good_norm) or weights_problem(policy, good_norm):
            return False
        good_norm = weights_norm(model)
        if ctx.is_main:
            save_checkpoint(path, {"model": model.state_dict(), "policy": policy.state_dict(),
                                   "ema": ema.state_dict() if ema is not None else None,
                                   "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
                                   "state": asdict(state), "rng": rng_state()}, cfg)
        return True

    def roll_back(reason: str):
        """Divergence: back to the last good ``last.pt`` with the LR lowered tenfold (returns the batch stream
        from there), or stop with ``TrainingDiverged`` when no rollback is left."""
        last = out_dir / LAST
        if state.rollbacks >= cfg.train.max_rollbacks or not last.exists():
            bar.close()
            kept = (f"last good checkpoint: {last} (step {load_checkpoint(last)['state']['step']})" if last.exists()
                    else "no checkpoint was written yet")
            raise TrainingDiverged(
                f"training diverged: {reason}; {kept}. Lower train.lr (now {cfg.train.lr}) or "
                f"train.grad_clip (now {cfg.train.grad_clip}).")
        nonlocal good_norm
        rollbacks, lr_scale, at = state.rollbacks + 1, state.lr_scale * 0.1, state.step
        restore(last)
        good_norm = weights_norm(model)
        state.rollbacks, state.lr_scale = rollbacks, lr_scale
        logger.truncate(state.step)
        logger.event("rollback", state.step, reason=reason, from_step=at, lr_scale=lr_scale)
        log.warning("%s: rolled back to step %d of %s with the LR scale lowered to %.3g (rollback %d of %d)",
                    reason, state.step, last, lr_scale, rollbacks, cfg.train.max_rollbacks)
        bar.reset(total=total)
        bar.update(state.step)
        window.update(dict.fromkeys(window, 0.0))
        return batch_stream(state.step)

    total = cfg.train.steps
    k_base = adaptive_k(cfg.data.n_uav, cfg.data.k_min, cfg.data.k_divisor, cfg.data.k_max)
    state.batch_size = state.batch_size or resolve_batch_size(cfg, model, train_store, k_base, device, dtype)

    def batches_from(step: int):
        """Batches in the exact order an uninterrupted run would see them from ``step`` on
        (at the current ``state.batch_size``)."""
        loader = make_loader(train_store, cfg.hardware.loader, state.batch_size, shuffle=True, seed=cfg.seed,
                             num_workers=cfg.hardware.num_workers, pin_memory=cfg.hardware.pin_memory,
                             prefetch_factor=cfg.hardware.prefetch_factor,
                             persistent_workers=cfg.hardware.persistent_workers, drop_last=True,
                             rank=ctx.rank, world_size=ctx.world_size)
        if len(loader) == 0:
            raise ConfigError(f"data.train_scenes={len(train_store)} is smaller than "
                              f"hardware.batch_size={state.batch_size}")
        if ctx.enabled:
            log.info("data parallel: %d processes, global batch %d = %d per rank", ctx.world_size,
                     state.batch_size, state.batch_size // ctx.world_size)
        epoch, skip = divmod(step, len(loader))
        while True:
            loader.batch_sampler.set_epoch(epoch)
            for i, batch in enumerate(loader):
                if i >= skip:
                    yield batch
            epoch, skip = epoch + 1, 0

    def batch_stream(step: int):
        if cfg.optim.prefetch and device.type == "cuda":
            # On the CPU a background thread only competes with the step for the same cores
            # (840 vs 1,057 graphs/s measured on 2 cores); the in-memory gather is already ~1 ms.
            return prefetched(batches_from(step), device, cfg.hardware.pin_memory)
        return batches_from(step)

    batches = batch_stream(state.step)
    sampler = CurriculumSampler(stage_train, cfg.seed) if len(sizes) > 1 else None
    n_targets = scene_distribution(cfg.task).n_targets

    def stage_k(stage: int) -> int:
        return adaptive_k(sizes[stage], cfg.data.k_min, cfg.data.k_divisor, cfg.data.k_max)

    def out_of_memory(err: torch.cuda.OutOfMemoryError):
        """CUDA OOM in a step: halve the batch, free the cache, log it, and go on from the same step."""
        if ctx.enabled or state.batch_size < 2:
            raise err
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        state.batch_size //= 2
        log.warning("CUDA out of memory at step %d: batch size halved to %d", state.step, state.batch_size)
        logger.log({"hardware/batch_size": state.batch_size}, state.step)
        return batch_stream(state.step)

    logger.log({"model/params": n_params}, step=state.step)

    def objective(batch, k: int) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """(loss, per-step stats logged as train/<name>, UAVs the loss averages over) of ``trainer.name``."""
        if cfg.trainer.name == "reinforce":  # rollouts drawn from a pure function of (seed, step): resumable
            generator = torch.Generator(device=device).manual_seed(cfg.seed * 1_000_003 + state.step)
            return reinforce_loss(runner, batch, k, cfg.trainer.samples, generator, cfg.trainer.imitation_weight)
        loss, acc, covered = batch_imitation_loss(runner, batch, k)
        return loss, {"acc": acc}, covered

    def validate(stage: int) -> dict[str, float]:
        """Greedy-decoded metrics of the policy on ``stage``'s validation scenes (rank 0), on every rank."""
        val: dict[str, float] = {}
        if ctx.is_main:
            result = evaluate_model(policy, stage_val[stage], cfg.train.decoder, stage_k(stage), device,
                                    amp_dtype=dtype)
            val = {f"val/{key}": value for key, value in mean_metrics(result.metrics).items()}
            val["perf/peak_mem_mb"] = peak_memory_mb(device)
            logger.log(val, state.step)
        return distributed.broadcast_from_main(val)

    if cfg.trainer.init_from and state.step == 0:  # the starting policy is the one to beat: best.pt until then
        val = validate(len(sizes) - 1 if sampler is None else cur_state.stage)
        if sampler is None:
            state.best_gap = val["val/optimality_gap"]
            checkpoint(out_dir / BEST)
        log.info("starting policy: val optimality_gap %.4f", val["val/optimality_gap"])

    window: dict[str, float] = {"loss": 0.0, "n": 0, "wait": 0.0, "busy": 0.0, "graphs": 0}
    speeds: list[float] = []
    val: dict[str, float] = {}
    bar = tqdm(total=total, initial=state.step, desc="train", unit="step", mininterval=2.0, dynamic_ncols=True,
               disable=not ctx.is_main)
    model.train()
    with StopRequest() as stop:  # SIGINT/SIGTERM: finish the step, write last.pt, raise Interrupted
        tick = time.perf_counter()
        while state.step < total:
            if sampler is None:
                batch = next(batches).to(device, non_blocking=True)
            else:
                n_stage = sizes[cur_state.stage]
                size = stage_batch_size(cfg.curriculum.batch_policy, n_stage + n_targets(n_stage), state.batch_size,
                                        cfg.curriculum.node_budget)
                batch = sampler.batch(state.step, cur_state.stage, size, cfg.curriculum.replay[cur_state.stage],
                                      ctx.rank, ctx.world_size).to(device, non_blocking=True)
            got_batch = time.perf_counter()
            k = jittered_k(stage_k(cur_state.stage), cfg.data.k_jitter, cfg.seed, state.step, cfg.data.k_max)
            for group in optimizer.param_groups:
                group["lr"] = cfg.train.lr * state.lr_scale * lr_factor(state.step, total, cfg.train.warmup_steps,
                                                                        cfg.train.schedule)
            with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                try:
                    loss, stats, covered = objective(batch, k)
                except torch.cuda.OutOfMemoryError as err:
                    batches = out_of_memory(err)
                    continue
                except Exception as err:  # noqa: BLE001 - compilation errors surface at the first call
                    if runner is ddp:
                        raise
                    warnings.warn(f"optim.compile: compiled forward failed ({type(err).__name__}: {err}); "
                                  "continuing in eager mode", RuntimeWarning)
                    runner = ddp
                    loss, stats, covered = objective(batch, k)
            optimizer.zero_grad(set_to_none=True)
            loss_value, finite = loss.item(), bool(torch.isfinite(loss))
            stat_values = {name: value.item() for name, value in stats.items()}
            stopping = stop.requested is not None
            if ctx.enabled:
                # One reduction per step: every rank skips the same non-finite steps (or the gradient all-reduce
                # would deadlock) and stops at the same step on a signal, and the loss is weighted by this rank's
                # share of the batch's covered UAVs, so DDP's gradient average is exactly the full batch's mean.
                n = float(covered)
                bad, stops, n_all, loss_sum, *stat_sums = distributed.all_reduce_sum(
                    [float(not finite), float(stopping), n, loss_value * n, *(v * n for v in stat_values.values())],
                    device)
                stopping = stops > 0
                n_all = max(n_all, 1.0)  # 0 only when every rank's loss is NaN (nothing covered): skipped below
                finite, loss_value = bad == 0, loss_sum / n_all
                stat_values = {name: total / n_all for name, total in zip(stat_values, stat_sums)}
                loss = loss * (n * ctx.world_size / n_all)
            if not finite:
                state.bad_steps += 1
                state.lr_scale *= 0.5
                log.warning("non-finite loss at step %d (%d in a row): step skipped, LR scale now %.3g",
                            state.step, state.bad_steps, state.lr_scale)
                if state.bad_steps >= cfg.train.max_bad_steps:
                    batches = roll_back(f"{state.bad_steps} non-finite losses in a row at step {state.step}")
                tick = time.perf_counter()
                continue
            state.bad_steps = 0
            try:
                scaler.scale(loss).backward()
            except torch.cuda.OutOfMemoryError as err:
                batches = out_of_memory(err)
                continue
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
            scaler.step(optimizer)
            scaler.update()
            if ema is not None:
                ema.update_parameters(model)
            state.step += 1
            done = time.perf_counter()
            window["loss"] += loss_value
            for name, value in stat_values.items():
                window[name] = window.get(name, 0.0) + value
            window["n"] += 1
            window["wait"] += got_batch - tick
            window["busy"] += done - tick
            window["graphs"] += batch.num_graphs * ctx.world_size  # the whole job's throughput
            tick = done
            bar.update(1)

            if state.step % cfg.train.log_every == 0 or state.step == total:
                n = window["n"]
                metrics = {"train/loss": window["loss"] / n, **{f"train/{name}": window[name] / n for name in stat_values},
                           "train/k": k, "train/lr": optimizer.param_groups[0]["lr"],
                           "perf/graphs_per_s": window["graphs"] / window["busy"],
                           "perf/step_ms": 1000 * window["busy"] / n, "perf/data_wait_frac": window["wait"] / window["busy"],
                           "perf/peak_mem_mb": peak_memory_mb(device)}
                logger.log(metrics, state.step)
                speeds.append(metrics["perf/graphs_per_s"])
                bar.set_postfix(loss=f"{metrics['train/loss']:.3f}", gps=f"{metrics['perf/graphs_per_s']:.0f}")
                window = dict.fromkeys(window, 0.0)
            if state.step % cfg.train.eval_every == 0 or state.step == total:
                stage = cur_state.stage  # the stage evaluated: its own validation scenes
                val = validate(stage)
                if sampler is not None:
                    event = update_curriculum(cfg.curriculum, cur_state, 1.0 - val["val/optimality_gap"])
                    if event == FALLBACK:
                        state.lr_scale *= cfg.curriculum.learning_rate_decay
                    if event is not None:
                        logger.event(event, state.step, stage=cur_state.stage, n_uav=sizes[cur_state.stage],
                                     performance=1.0 - val["val/optimality_gap"], lr_scale=state.lr_scale)
                        log.info("curriculum %s at step %d: stage %d (%d UAVs)", event, state.step, cur_state.stage,
                                 sizes[cur_state.stage])
                    state.curriculum = asdict(cur_state)
                    logger.log({"curriculum/stage": cur_state.stage, "curriculum/n_uav": sizes[cur_state.stage],
                                "curriculum/advances": cur_state.advances, "curriculum/fallbacks": cur_state.fallbacks},
                               state.step)
                if val["perf/peak_mem_mb"] > 0.8 * device_memory_mb(device):
                    log.warning("peak memory %.0f MB is above 80%% of the device's %.0f MB: lower hardware.batch_size "
                                "or enable optim.grad_checkpoint / optim.amp", val["perf/peak_mem_mb"],
                                device_memory_mb(device))
                gap = val["val/optimality_gap"]
                final_stage = stage == len(sizes) - 1  # smaller stages' gaps are not comparable with the target's
                if not math.isfinite(gap):
                    log.warning("validation optimality_gap is %s at step %d: best.pt kept as it is", gap, state.step)
                elif final_stage and gap < state.best_gap - 1e-6:
                    if not checkpoint(out_dir / BEST):
                        batches = roll_back(f"the weights {weights_problem(model, good_norm)} at step {state.step}")
                        continue
                    state.best_gap, state.evals_without_improvement = gap, 0
                elif final_stage:
                    state.evals_without_improvement += 1
                    if cfg.train.schedule == "plateau" and state.evals_without_improvement >= cfg.train.plateau_patience:
                        state.lr_scale *= 0.8
                        state.evals_without_improvement = 0
                if ctx.is_main:
                    echo(f"step {state.step}: val ({sizes[stage]} UAVs) optimality_gap {gap:.4f} "
                              f"(best {state.best_gap:.4f}), "
                              f"completion_score {val['val/completion_score']:.3f}")
                tick = time.perf_counter()
            if stopping or state.step % cfg.train.ckpt_every == 0 or state.step == total:
                if not checkpoint(out_dir / LAST):
                    batches = roll_back(f"the weights {weights_problem(model, good_norm)} at step {state.step}")
                    continue
                tick = time.perf_counter()
            if stopping:
                bar.close()
                raise Interrupted(f"interrupted by {stop.requested or 'a signal on another rank'} at step {state.step}: "
                                  f"{out_dir / LAST} saved", stop.exit_code)
    bar.close()
    if not (out_dir / BEST).exists():
        checkpoint(out_dir / BEST)
    perf = {"perf/graphs_per_s": float(np.median(speeds)) if speeds else float("nan"),
            "perf/peak_mem_mb": peak_memory_mb(device)}
    return TrainResult(policy, state, out_dir / BEST, out_dir / LAST, val, perf)
