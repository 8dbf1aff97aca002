"""The one training loop every algorithm runs in, readable top to bottom (``Trainer.fit``).

One step: collect new experience when the algorithm's cadence says so, take the step's batch, update the weights
once (``Updater``: the algorithm's loss, backward, clipping, each network's optimiser; with ``optim.compile`` the
whole step compiled), update the moving average of the weights (the policy that is evaluated and shipped: it
smooths the step-to-step noise). Every ``eval_every`` steps the algorithm's workload scores the policy on its fixed
validation set (the algorithm's ``score``: name and direction), and the curriculum, ``best.pt`` and the plateau
schedule follow it; ``last.pt`` and ``best.pt`` (``Checkpointer``) hold everything needed to continue with no lost
or repeated step.

Nothing in a step makes the host wait for the device: the loss, the stats and whether the update was applied
accumulate on the device (``LogWindow``), read once when the host needs them (a log line, a validation, a
checkpoint). A step whose loss or gradients are not finite changes no weight and still counts; at the read the
LR is halved for each, and ``max_bad_steps`` in a row, or weights that blew up, roll back to ``last.pt`` (only
ever written with healthy weights) with the LR lowered tenfold, stopping with a clear message when
``max_rollbacks`` are spent (``Recovery``). SIGINT/SIGTERM stop the run at the end of the step with ``last.pt``
written (``Interrupted``). A CUDA out-of-memory step halves the batch and goes on.

Under ``torchrun`` (DDP) each rank trains on its shard of every global batch;
rank 0 alone validates, logs and writes checkpoints, and broadcasts what it saw.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.optim.swa_utils import AveragedModel

from uavgnn.algorithms.base import Phase, step_loss
from uavgnn.algorithms.registry import make_algorithm
from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.console import echo, progress
from uavgnn.infrastructure.device import amp_dtype, prepare_device
from uavgnn.infrastructure.errors import Interrupted
from uavgnn.infrastructure.perf import peak_memory_mb, warn_if_near_capacity
from uavgnn.infrastructure.randomness import seed_everything
from uavgnn.loggers import MetricLogger
from uavgnn.runs.checkpoints import load_weights
from uavgnn.runs.layout import BEST, LAST
from uavgnn.training.batch_size import resolve_batch_size
from uavgnn.training.checkpointing import Checkpointer
from uavgnn.training.curriculum import CurriculumState, curriculum_step
from uavgnn.training.ema import update_moving_average
from uavgnn.training.recovery import Recovery
from uavgnn.training.schedule import phase_lr
from uavgnn.training.state import StepDone, TrainResult, TrainState
from uavgnn.training.step_stats import LogWindow
from uavgnn.training.stop import StopRequest
from uavgnn.training.update import Updater

log = logging.getLogger(__name__)


class Trainer:
    """Owns the loop and everything algorithms share; ``fit()`` trains to ``train.steps``."""

    def __init__(self, cfg: Any, out_dir: Path, resume_from: Path | None = None) -> None:
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
        self.update = Updater(cfg, self.algorithm, self.model, self.device, self.dtype)
        # its counter on the weights' device (torch puts it on the CPU otherwise: a CUDA step would mix devices)
        self.ema = AveragedModel(self.model, self.device) if cfg.train.ema_decay > 0 else None
        self.checkpoints = Checkpointer(cfg, self.model, self.ema, self.update, self.algorithm, self.work)
        self.policy = self.checkpoints.policy  # evaluated, checkpointed, shipped
        self.recovery = Recovery(cfg.train, out_dir / LAST)
        self.state, self.cur = TrainState(best=self.score.worst), CurriculumState()
        self.window = LogWindow(self.device)  # the steps since the last log line (in last.pt: exact after resume)
        if resume_from is not None:
            self.restore(resume_from)
            log.info("resumed from %s at step %d", resume_from, self.state.step)
        self.checkpoints.trust()  # the weights now are healthy: what "exploded" is measured by
        log.info("model %s: %s parameters", cfg.model.name, f"{self.model.num_parameters():,}")
        self.update.wrap()  # after the restore: DDP broadcasts rank 0's weights
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
        """Train to ``train.steps``: the starting policy, the steps, the best policy as a result."""
        cfg, state, self.logger = self.cfg, self.state, logger
        if state.step == 0:  # a resumed run's history has it already
            self.logger.log({"model/params": self.model.num_parameters()}, step=state.step)
        if self.algorithm.starts_trained and state.step == 0:  # the starting policy is the one to beat: best.pt
            val = self.validate(len(self.sizes) - 1 if len(self.sizes) == 1 else self.cur.stage)
            if len(self.sizes) == 1:
                self.state.best = val[self.score.key]
                self.checkpoint(self.out_dir / BEST)
            log.info("starting policy: %s %.4f", self.score.key, val[self.score.key])
        self.bar = progress(
            total=cfg.train.steps, initial=state.step, desc="train", unit="step", disable=not self.ctx.is_main
        )
        self.model.train()
        try:
            speeds, val = self.run_steps()
        finally:
            self.bar.close()  # before any error is said
        if not (self.out_dir / BEST).exists():
            self.checkpoint(self.out_dir / BEST)
        perf = {
            f"perf/{self.work.unit}_per_s": float(np.median(speeds)) if speeds else float("nan"),
            "perf/peak_mem_mb": peak_memory_mb(self.device),
        }
        return TrainResult(
            self.policy, self.state, self.score, self.out_dir / BEST, self.out_dir / LAST, val, perf, self.work
        )

    def run_steps(self) -> tuple[list[float], dict[str, float]]:
        """The steps, each followed by what its count calls for: a log line, a validation, ``last.pt``; returns the
        log lines' speeds and the last validation."""
        cfg, speeds = self.cfg, []
        val = dict(self.state.last_val)  # a run resumed at its end (stopped in its test phase): its last validation
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
                    val = self.validate(self.cur.stage)
                    self.follow_validation(val)
                    tick = time.perf_counter()
                if self.state.step != step:  # rolled back
                    continue
                if save_now:
                    problem = self.checkpoint(self.out_dir / LAST)
                    if problem:
                        self.roll_back(f"the weights {problem} at step {step}")
                        continue
                    tick = time.perf_counter()
                if stopping:
                    raise Interrupted(
                        f"interrupted by {stop.requested or 'a signal on another rank'} at step "
                        f"{step}: {self.out_dir / LAST} saved",
                        stop.exit_code,
                        saved_step=step,
                    )
        return speeds, val

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
        self.update.optimisers.set_lr(lr, state.lr_scale * factor)
        draws = self.algorithm.draws(batch, state.step)
        try:
            result = self.update(batch, draws, stop_seen)
        except torch.cuda.OutOfMemoryError as err:
            return self.out_of_memory(err)
        self.algorithm.after_step(self.model, result.applied)
        self.work.feedback(batch, result.feedback)
        if self.ema is not None:
            update_moving_average(self.ema, self.model, cfg.train.ema_decay, result.applied)
        state.step += 1
        self.update.updating = False
        self.window.add(result.logged, result.stats, result.applied)
        done = time.perf_counter()
        items = self.work.items(batch) * self.ctx.world_size
        self.window.count(steps=1, wait=got_batch - tick, busy=done - tick, items=items)
        self.bar.update(1)
        return StepDone(list(result.stats), result.stop_seen)

    # -- what happens around steps ---------------------------------------------------------------------------

    def read_steps(self) -> bool:
        """The one host read of the steps since the last: their loss and stats into the log window, and the
        verdict on those whose update was not applied (non-finite): the LR halved for each, a rollback after
        ``max_bad_steps`` in a row. Returns False when it rolled back."""
        skipped, run, worst = self.window.read()
        self.state.bad_steps = run
        if skipped and self.recovery.skipped(self.state, skipped, worst):
            self.roll_back(f"{worst} non-finite losses in a row before step {self.state.step}")
            return False
        return True

    def log_window(self, done: StepDone) -> float:
        """Log the means since the last log line; returns the window's items (graphs, samples) per second."""
        w, speed_key = self.window.sums, f"perf/{self.work.unit}_per_s"
        metrics = {
            "train/loss": self.window.mean("loss"),
            **{f"train/{name}": self.window.mean(name) for name in done.stats},
            "train/lr": float(self.update.optimisers.adamw[0].param_groups[0]["lr"]),  # a device tensor with graphs
            speed_key: w["items"] / w["busy"],
            "perf/step_ms": 1000 * w["busy"] / w["steps"],
            "perf/data_wait_frac": w["wait"] / w["busy"],
            "perf/peak_mem_mb": peak_memory_mb(self.device),
            **self.work.window_stats(),
        }
        self.logger.log(metrics, self.state.step)
        self.bar.set_postfix(loss=f"{metrics['train/loss']:.3f}", speed=f"{metrics[speed_key]:.0f}/s")
        self.window.reset()
        return metrics[speed_key]

    def validate(self, stage: int) -> dict[str, float]:
        """Greedy-decoded metrics of the policy on ``stage``'s validation scenes (rank 0), on every rank."""
        val: dict[str, float] = {}
        if self.ctx.is_main:
            val = self.work.validate(self.policy, stage, self.dtype)
            val["perf/peak_mem_mb"] = peak_memory_mb(self.device)
            self.logger.log(val, self.state.step)
        return distributed.broadcast_from_main(val)

    def follow_validation(self, val: dict[str, float]) -> None:
        """What a validation moves: the curriculum's stage, ``best.pt`` on an improvement at the final stage, the
        plateau schedule's LR; said in one line."""
        cfg, state, stage = self.cfg, self.state, self.cur.stage
        value = val[self.score.key]
        state.last_val = {key: float(v) for key, v in val.items()}
        if len(self.sizes) > 1:
            self.state.lr_scale = curriculum_step(
                cfg.curriculum, self.cur, 1.0 - value, self.sizes, self.logger, state.step, state.lr_scale
            )
            state.curriculum = asdict(self.cur)
        warn_if_near_capacity(val["perf/peak_mem_mb"], self.device)
        plateau = cfg.train.plateau_patience if cfg.train.schedule == "plateau" else None
        if state.validated(value, self.score, stage == len(self.sizes) - 1, plateau):
            problem = self.checkpoint(self.out_dir / BEST)
            if problem:
                self.roll_back(f"the weights {problem} at step {state.step}")
                return
            state.improved(value)
        if self.ctx.is_main:
            echo(f"step {state.step}: {self.work.describe(val, stage, state.best)}")

    # -- checkpoints, phases, faults ---------------------------------------------------------------------------

    def checkpoint(self, path: Path) -> str | None:
        """Write ``path`` if the weights are healthy (same verdict on every rank), else say what is wrong."""
        self.window.read()  # the window as it is now, in case a signal came between reads
        return self.checkpoints.save(path, self.state, self.window.sums, self.logger.rows)

    def restore(self, path: Path) -> None:
        """Everything ``path`` holds: weights, optimiser, algorithm, counters, RNG (resume and rollback)."""
        self.state, self.cur, window = self.checkpoints.restore(path, self.score.worst)
        self.window = LogWindow(self.device, window)

    def roll_back(self, reason: str) -> None:
        """Divergence: back to the last good ``last.pt`` with the LR lowered tenfold, or stop with
        ``TrainingDiverged`` when no rollback is left (``Recovery``)."""
        rollbacks, lr_scale = self.recovery.rollback(self.state, reason)
        at = self.state.step
        self.restore(self.out_dir / LAST)
        self.checkpoints.trust()
        self.state.rollbacks, self.state.lr_scale = rollbacks, lr_scale
        self.logger.truncate(self.state.step)
        self.logger.event("rollback", self.state.step, reason=reason, from_step=at, lr_scale=lr_scale)
        self.recovery.rolled_back(reason, self.state, at)
        self.bar.reset(total=self.cfg.train.steps)
        self.bar.update(self.state.step)  # the log window is the checkpoint's, as the history's kept rows are
        self.work.restart(self.state.step, self.state.batch_size)

    def start_phase(self, phase: Phase) -> None:
        """``phase``'s first step is next: restart from the best policy so far with fresh optimisers, moving
        average and log window (``uavgnn.training.schedule``)."""
        weights = self.checkpoints.best_policy(self.out_dir / BEST)
        if weights is not None:
            load_weights(self.model, weights, self.out_dir / BEST, f"the best policy before phase {phase.name}")
        self.update.restart(phase.lr)
        if self.ema is not None:
            self.ema.module.load_state_dict(self.model.state_dict())
            self.ema.n_averaged.zero_()  # the first update copies the weights, as in a new run
        state = self.state
        state.start_phase()
        self.window.restart()
        self.work.restart(state.step, state.batch_size)
        source = (
            f"the best policy so far ({self.score.key} {state.best:.4f})"
            if weights is not None
            else "the current weights (no best.pt yet)"
        )
        if self.ctx.is_main:
            echo(f"step {state.step}: phase {phase.name} starts from {source}")
            self.logger.event(f"phase {phase.name}", state.step, best=state.best)

    def out_of_memory(self, err: torch.cuda.OutOfMemoryError) -> None:
        """CUDA OOM in a step: halve the batch (``Recovery``), log it, and go on from the same step."""
        self.recovery.out_of_memory(err, self.state, self.update)
        self.logger.log({"hardware/batch_size": self.state.batch_size}, self.state.step)
        self.work.restart(self.state.step, self.state.batch_size)

    def stop_mid_step(self, stop: StopRequest, err: Exception) -> None:
        """A signal came and the step under way failed with it: stop at the last completed step (``Recovery``)."""
        save_last = None if self.update.updating else (lambda: self.checkpoint(self.out_dir / LAST))
        raise self.recovery.stopped_mid_step(stop.requested, stop.exit_code, err, self.state.step, save_last)


def train(cfg: Any, out_dir: Path, logger: MetricLogger, resume_from: Path | None = None) -> TrainResult:
    """Train with ``cfg.algorithm`` in the shared loop (see ``Trainer``)."""
    return Trainer(cfg, out_dir, resume_from).fit(logger)
