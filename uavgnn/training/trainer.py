"""The one training loop every algorithm runs in, readable top to bottom (``Trainer.fit``).

One step: collect new experience when the algorithm's cadence says so, take the step's batch, ask the algorithm
for its loss (``uavgnn.algorithms``; with ``optim.compile`` its whole step is compiled), clip and step each of its
networks' optimisers, update the moving average of the weights (the policy that is evaluated and shipped: it smooths
the step-to-step noise). Every ``eval_every`` steps the algorithm's workload scores the policy on its fixed
validation set (the algorithm's ``score``: name and direction); ``last.pt`` (and ``best.pt`` on improvement) hold
everything needed to continue with no lost or repeated step.

Nothing in a step makes the host wait for the device: the loss, the stats and whether the update was applied
accumulate on the device (``StepStats``), read once when the host needs them (a log line, an evaluation, a
checkpoint). A step whose loss or gradients are not finite changes no weight (``Optimisers.step``) and still
counts; at the read the LR is halved for each, and ``max_bad_steps`` in a row, or weights that blew up, roll
back to ``last.pt`` (only ever written with healthy weights) with the LR lowered tenfold, stopping with a clear
message when ``max_rollbacks`` are spent. SIGINT/SIGTERM stop the run at the end of the step with ``last.pt``
written (``Interrupted``). A CUDA out-of-memory step halves the batch and goes on.

Under ``torchrun`` (DDP) each rank trains on its shard of every global batch;
rank 0 alone evaluates, logs and writes checkpoints, and broadcasts what it saw.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch.optim.swa_utils import AveragedModel

from uavgnn.algorithms.base import AlgorithmStep, step_loss
from uavgnn.algorithms.registry import describe, make_algorithm
from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.console import echo, progress
from uavgnn.infrastructure.device import amp_dtype, maybe_compile, prepare_device
from uavgnn.infrastructure.errors import CheckpointError, Interrupted
from uavgnn.infrastructure.perf import device_memory_mb, peak_memory_mb
from uavgnn.infrastructure.randomness import seed_everything
from uavgnn.loggers import MetricLogger
from uavgnn.runs.checkpoints import (
    load_checkpoint,
    load_part,
    load_weights,
    rank_data_path,
    rng_state,
    save_checkpoint,
    save_part,
    set_rng_state,
    weights_norm,
    weights_problem,
)
from uavgnn.runs.layout import BEST, LAST
from uavgnn.training.batch_size import resolve_batch_size
from uavgnn.training.curriculum import CurriculumState, curriculum_step
from uavgnn.training.ema import update_moving_average
from uavgnn.training.optimisers import Optimisers
from uavgnn.training.phases import Phases, phase_lr
from uavgnn.training.recovery import Recovery
from uavgnn.training.state import TrainResult, TrainState
from uavgnn.training.step_stats import HOST_KEYS, StepStats
from uavgnn.training.stop import StopRequest
from uavgnn.training.update import Updates

log = logging.getLogger(__name__)
# sums of every log window (plus the algorithm's stats): loss and stats over the n applied of its steps
WINDOW = ("loss", "n", *HOST_KEYS)


@dataclass
class StepDone:
    stats: list[str]  # the algorithm's stat names, summed into the log window
    stopping: bool  # a signal asked the run to stop (agreed by every rank)


class Trainer(Recovery, Phases, Updates):
    """Owns the loop and everything algorithms share; ``fit()`` trains to ``train.steps``."""

    def __init__(self, cfg, out_dir: Path, resume_from: Path | None = None) -> None:
        """Build everything and restore ``resume_from``; nothing is written anywhere until ``fit``, so a
        checkpoint that does not fit is refused with the run directory as it was."""
        self.cfg, self.out_dir = cfg, out_dir
        self.logger: MetricLogger | None = None  # fit's
        self.device = prepare_device(cfg)
        seed_everything(cfg.seed)
        self.dtype = amp_dtype(cfg, self.device)
        self.ctx = distributed.context()
        self.algorithm = make_algorithm(cfg, self.device)
        self.model = self.algorithm.build_model(cfg).to(self.device)
        if resume_from is None:  # before the data: a checkpoint that does not fit fails before any labelling
            self.algorithm.initialize(self.model)
        self.work = self.algorithm.workload(self.model)  # the data side: scene graphs, experience, trajectories
        self.cadence, self.score, self.sizes = self.algorithm.cadence(), self.algorithm.score, self.work.sizes
        self.phases = self.algorithm.phases()
        self.phase_starts = {phase.start: phase for phase in self.phases[1:]}  # each restarts from best.pt
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.dtype == torch.float16)
        self.graphed = self.graph_updates()  # optim.cuda_graphs: the update replayed as one CUDA graph
        self.optimisers = Optimisers(
            self.algorithm.networks(self.model),
            cfg.train.lr,
            cfg.train.weight_decay,
            cfg.train.grad_clip,
            capturable=self.graphed is not None,
        )
        # its counter on the weights' device (torch puts it on the CPU otherwise: a CUDA step would mix devices)
        self.ema = AveragedModel(self.model, self.device) if cfg.train.ema_decay > 0 else None
        self.policy = self.ema.module if self.ema is not None else self.model  # evaluated, checkpointed, shipped
        self.state, self.cur = TrainState(best=self.score.worst), CurriculumState()
        self.window = dict.fromkeys(WINDOW, 0.0)  # sums since the last log line (saved in last.pt: exact after resume)
        self.unread = StepStats(self.device)  # what the steps since the last read left on the device
        self.updating = False  # inside the optimiser update of a step
        if resume_from is not None:
            self.restore(resume_from)
            log.info("resumed from %s at step %d", resume_from, self.state.step)
        self.good_norm = weights_norm(self.model)  # of the last healthy checkpoint: what "exploded" is measured by
        log.info("model %s: %s parameters", cfg.model.name, f"{self.model.num_parameters():,}")
        # The algorithm's step as a module (its loss is the forward): DDP broadcasts rank 0's weights at construction
        # and averages the gradients of that forward in backward; optim.compile compiles it whole (forward + loss).
        stepper = AlgorithmStep(self.model, self.algorithm)
        self.eager = torch.nn.parallel.DistributedDataParallel(stepper) if self.ctx.enabled else stepper
        self.step_fn = maybe_compile(self.eager, cfg.optim.compile)
        self.state.batch_size = self.state.batch_size or resolve_batch_size(
            cfg, self.model, step_loss(self.algorithm, self.device, self.dtype), self.work.probe_store, self.device
        )
        if self.ctx.enabled:
            log.info(
                "data parallel: %d processes, global batch %d = %d per rank",
                self.ctx.world_size,
                self.state.batch_size,
                self.state.batch_size // self.ctx.world_size,
            )
        self.work.restart(self.state.step, self.state.batch_size)
        self.bar = None  # the progress bar while training runs

    # -- the loop -------------------------------------------------------------------------------------------

    def fit(self, logger: MetricLogger) -> TrainResult:
        cfg, state, self.logger = self.cfg, self.state, logger
        if state.step == 0:  # a resumed run's history has it already
            self.logger.log({"model/params": self.model.num_parameters()}, step=state.step)
        if self.algorithm.starts_trained and state.step == 0:  # the starting policy is the one to beat: best.pt
            val = self.validate(len(self.sizes) - 1 if len(self.sizes) == 1 else self.cur.stage)
            if len(self.sizes) == 1:
                self.state.best = val[self.score.key]
                self.checkpoint(self.out_dir / BEST)
            log.info("starting policy: %s %.4f", self.score.key, val[self.score.key])
        speeds: list[float] = []
        val = dict(state.last_val)  # a run resumed at its end (stopped in its test phase) reports its last validation
        self.bar = progress(
            total=cfg.train.steps, initial=state.step, desc="train", unit="step", disable=not self.ctx.is_main
        )
        self.model.train()
        with StopRequest() as stop:  # SIGINT/SIGTERM: finish the step, write last.pt, raise Interrupted
            tick = time.perf_counter()
            while self.state.step < cfg.train.steps:
                try:
                    done = self.train_step(tick, stop.requested is not None)
                except Exception as err:  # noqa: BLE001 - a signal to the process group may kill the loader's workers
                    if stop.requested is None:
                        raise
                    self.stop_mid_step(stop, err)
                tick = time.perf_counter()
                if done is None:  # out of memory: the same step again with half the batch
                    continue
                step, stopping = self.state.step, done.stopping
                at_end = step == cfg.train.steps or step in self.phase_starts  # the run's or a phase's end
                log_now = step % cfg.train.log_every == 0 or at_end
                eval_now = step % cfg.train.eval_every == 0 or at_end
                save_now = stopping or step % cfg.train.ckpt_every == 0 or at_end
                if (log_now or eval_now or save_now) and not self.read_steps():  # the one host read; rolled back
                    continue
                if log_now:
                    speeds.append(self.log_window(done))
                if eval_now:
                    val = self.evaluate()
                    tick = time.perf_counter()
                if self.state.step != step:  # evaluate() rolled back
                    continue
                if save_now:
                    problem = self.checkpoint(self.out_dir / LAST)
                    if problem:
                        self.roll_back(f"the weights {problem} at step {step}")
                        continue
                    tick = time.perf_counter()
                if stopping:
                    self.bar.close()
                    raise Interrupted(
                        f"interrupted by {stop.requested or 'a signal on another rank'} at step "
                        f"{step}: {self.out_dir / LAST} saved",
                        stop.exit_code,
                        saved_step=step,
                    )
        self.bar.close()
        if not (self.out_dir / BEST).exists():
            self.checkpoint(self.out_dir / BEST)
        perf = {
            f"perf/{self.work.unit}_per_s": float(np.median(speeds)) if speeds else float("nan"),
            "perf/peak_mem_mb": peak_memory_mb(self.device),
        }
        return TrainResult(
            self.policy, self.state, self.score, self.out_dir / BEST, self.out_dir / LAST, val, perf, self.work
        )

    def train_step(self, tick: float, stop_seen: bool) -> StepDone | None:
        """One optimiser step, its loss and stats left on the device for the next read; None when a CUDA
        out-of-memory error made it try again with half the batch."""
        cfg, state = self.cfg, self.state
        if state.step in self.phase_starts:
            self.start_phase(self.phase_starts[state.step])
        if self.cadence.updates and state.step % self.cadence.updates == 0:  # the algorithm's rhythm
            self.work.collect(state.step)
        batch = self.work.batch(state.step, self.cur.stage, state.batch_size)
        got_batch = time.perf_counter()
        lr, factor = phase_lr(self.phases, state.step, cfg.train.schedule)
        self.optimisers.set_lr(lr, state.lr_scale * factor)
        draws = self.algorithm.draws(batch, state.step)
        try:
            result = self.graphed(batch, draws, stop_seen) if self.graphed else self.update(batch, draws, stop_seen)
        except torch.cuda.OutOfMemoryError as err:
            return self.out_of_memory(err)
        self.algorithm.after_step(self.model, result.applied)
        self.work.feedback(batch, result.feedback)
        if self.ema is not None:
            update_moving_average(self.ema, self.model, cfg.train.ema_decay, result.applied)
        state.step += 1
        self.updating = False
        self.unread.add(result.logged, result.stats, result.applied)
        done = time.perf_counter()
        for name, value in (
            ("steps", 1),
            ("wait", got_batch - tick),
            ("busy", done - tick),
            ("items", self.work.items(batch) * self.ctx.world_size),
        ):
            self.window[name] += value
        self.bar.update(1)
        return StepDone(list(result.stats), result.stop_seen)

    # -- what happens around steps ---------------------------------------------------------------------------

    def read_window(self) -> tuple[int, int, int]:
        """The device sums into the log window; returns (steps skipped since the last read, the current run
        of skipped steps, the longest since the last read)."""
        sums, run, worst = self.unread.read()
        self.window.update(sums)
        skipped = self.window["steps"] - self.window["n"] - self.window["skipped"]
        self.window["skipped"] += skipped
        return int(skipped), run, worst

    def log_window(self, done: StepDone) -> float:
        """Log the means since the last log line; returns the window's items (graphs, samples) per second."""
        w, n, speed_key = self.window, self.window["n"], f"perf/{self.work.unit}_per_s"
        mean = (lambda total: total / n) if n else (lambda total: float("nan"))  # n = 0: every step skipped
        metrics = {
            "train/loss": mean(w["loss"]),
            **{f"train/{name}": mean(w[name]) for name in done.stats},
            "train/lr": float(self.optimisers.adamw[0].param_groups[0]["lr"]),  # a device tensor with graphs
            speed_key: w["items"] / w["busy"],
            "perf/step_ms": 1000 * w["busy"] / w["steps"],
            "perf/data_wait_frac": w["wait"] / w["busy"],
            "perf/peak_mem_mb": peak_memory_mb(self.device),
            **self.work.window_stats(),
        }
        self.logger.log(metrics, self.state.step)
        self.bar.set_postfix(loss=f"{metrics['train/loss']:.3f}", speed=f"{metrics[speed_key]:.0f}/s")
        self.window = dict.fromkeys(self.window, 0.0)
        self.unread.reset()
        return metrics[speed_key]

    def validate(self, stage: int) -> dict[str, float]:
        """Greedy-decoded metrics of the policy on ``stage``'s validation scenes (rank 0), on every rank."""
        val: dict[str, float] = {}
        if self.ctx.is_main:
            val = self.work.validate(self.policy, stage, self.dtype)
            val["perf/peak_mem_mb"] = peak_memory_mb(self.device)
            self.logger.log(val, self.state.step)
        return distributed.broadcast_from_main(val)

    def evaluate(self) -> dict[str, float]:
        """Validate the current stage, move the curriculum, keep best.pt and the plateau schedule up to date."""
        cfg, state, stage = self.cfg, self.state, self.cur.stage
        val = self.validate(stage)
        value = val[self.score.key]
        state.last_val = {key: float(v) for key, v in val.items()}
        if len(self.sizes) > 1:
            self.state.lr_scale = curriculum_step(
                cfg.curriculum, self.cur, 1.0 - value, self.sizes, self.logger, state.step, state.lr_scale
            )
            state.curriculum = asdict(self.cur)
        if val["perf/peak_mem_mb"] > 0.8 * device_memory_mb(self.device):
            log.warning(
                "peak memory %.0f MB is above 80%% of the device's %.0f MB: lower hardware.batch_size "
                "or enable optim.grad_checkpoint / optim.amp",
                val["perf/peak_mem_mb"],
                device_memory_mb(self.device),
            )
        final_stage = stage == len(self.sizes) - 1  # smaller stages' scores are not comparable with the target's
        if not math.isfinite(value):
            log.warning("validation %s is %s at step %d: best.pt kept as it is", self.score.key, value, state.step)
        elif final_stage and self.score.improves(value, state.best):
            problem = self.checkpoint(self.out_dir / BEST)
            if problem:
                self.roll_back(f"the weights {problem} at step {state.step}")
                return val
            state.best, state.evals_without_improvement = value, 0
        elif final_stage:
            state.evals_without_improvement += 1
            if cfg.train.schedule == "plateau" and state.evals_without_improvement >= cfg.train.plateau_patience:
                state.lr_scale *= 0.8
                state.evals_without_improvement = 0
        if self.ctx.is_main:
            echo(f"step {state.step}: {self.work.describe(val, stage, state.best)}")
        return val

    # -- checkpoints, faults ---------------------------------------------------------------------------------

    def checkpoint(self, path: Path) -> str | None:
        """Write ``path`` if the weights are healthy (same verdict on every rank), else say what is wrong."""
        norm = weights_norm(self.model)
        problem = weights_problem(norm, self.good_norm) or weights_problem(weights_norm(self.policy), self.good_norm)
        if problem:
            return problem
        self.good_norm = norm
        self.read_window()  # the window as it is now, in case a signal came between reads
        data = self.work.state_dict() if path.name == LAST else {}  # environments, replay: what resume needs
        if self.ctx.enabled and not self.ctx.is_main and data:  # each rank's own environments and buffer
            save_part(rank_data_path(path, self.ctx.rank), data)
        if self.ctx.is_main:
            save_checkpoint(
                path,
                {
                    "model": self.model.state_dict(),
                    "policy": self.policy.state_dict(),
                    "ema": self.ema.state_dict() if self.ema is not None else None,
                    "optimizer": self.optimisers.state_dict(),
                    "scaler": self.scaler.state_dict(),
                    "algorithm": self.algorithm.state_dict(),
                    "state": asdict(self.state),
                    "rng": rng_state(),
                    "data": data,
                    "window": dict(self.window),
                    "history_rows": self.logger.rows,
                    **self.work.checkpoint_extras(),
                },
                self.cfg,
            )
        return None

    def restore(self, path: Path) -> None:
        """Everything a checkpoint holds: weights, optimiser, algorithm, counters, RNG (resume and rollback).
        Each part goes through ``load_weights``: one that does not fit is a one-line error naming it."""
        ckpt = load_checkpoint(path, self.device)
        config = describe(ckpt["config"])
        load_weights(self.model, ckpt["model"], path, config)
        load_weights(self.optimisers, ckpt["optimizer"], path, config, "optimiser state")
        load_weights(self.scaler, ckpt["scaler"], path, config, "gradient-scaler state")
        if self.ema is not None:
            load_weights(self.ema, ckpt["ema"], path, config, "moving-average weights")
        load_weights(self.algorithm, ckpt.get("algorithm", {}), path, config, "algorithm state")
        own = rank_data_path(path, self.ctx.rank)
        data = load_part(own, self.device) if self.ctx.rank > 0 and own.exists() else ckpt.get("data", {})
        load_weights(self.work, data, path, config, "environment and replay state")
        try:
            saved = dict(ckpt["state"])
            saved.setdefault("best", saved.pop("best_gap", self.score.worst))  # named best_gap before issue 31
            self.state = TrainState(**saved)
            self.cur = CurriculumState(**self.state.curriculum)
            set_rng_state(ckpt["rng"])
        except (KeyError, TypeError, ValueError, RuntimeError) as err:
            raise CheckpointError(
                f"checkpoint {path} ({config}): its training counters do not fit this version "
                f"({type(err).__name__}: {err})"
            ) from None
        self.window = {**dict.fromkeys(WINDOW, 0.0), **ckpt.get("window", {})}
        self.window["steps"] = self.window["steps"] or self.window["n"]  # before issue 32: every step was applied
        self.unread = StepStats(self.device, self.window)


def train(cfg, out_dir: Path, logger: MetricLogger, resume_from: Path | None = None) -> TrainResult:
    """Train with ``cfg.algorithm`` in the shared loop (see ``Trainer``)."""
    return Trainer(cfg, out_dir, resume_from).fit(logger)
