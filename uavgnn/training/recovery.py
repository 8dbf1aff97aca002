"""What the loop does when a step goes wrong: roll back, skip, or stop, and say so.

- a non-finite loss or gradient: the step's update is skipped on the device, and
  at the next read of the steps (a log line) the LR is halved for each such
  step; ``train.max_bad_steps`` in a row count as a divergence;
- a divergence (or weights that blew up, caught before any checkpoint is
  written): back to the last good ``last.pt`` with the LR lowered tenfold, at
  most ``train.max_rollbacks`` times, then ``TrainingDiverged`` naming the
  last good checkpoint;
- CUDA out of memory: the batch is halved and the same step is tried again;
- a signal while a step is under way: stop at the last completed step with its ``last.pt``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.errors import Interrupted, TrainingDiverged
from uavgnn.runs.checkpoints import load_checkpoint
from uavgnn.training.state import TrainState
from uavgnn.training.update import Updater

log = logging.getLogger(__name__)


class Recovery:
    """The rules of ``train.max_bad_steps`` and ``train.max_rollbacks`` over the run's ``last`` checkpoint."""

    def __init__(self, train: Any, last: Path) -> None:
        self.train, self.last = train, last

    def skipped(self, state: TrainState, skipped: int, worst: int) -> bool:
        """``skipped`` steps since the last read had a non-finite loss or gradient (their updates were not
        applied), at most ``worst`` in a row: the LR halved for each; True when that many in a row is a divergence
        (``train.max_bad_steps``)."""
        state.lr_scale *= 0.5**skipped
        log.warning(
            "non-finite loss or gradients in %d step(s) before step %d (at most %d in a row): their updates "
            "skipped, LR scale now %.3g",
            skipped,
            state.step,
            worst,
            state.lr_scale,
        )
        return worst >= self.train.max_bad_steps

    def rollback(self, state: TrainState, reason: str) -> tuple[int, float]:
        """The rollback the divergence ``reason`` calls for: (rollbacks so far, the LR scale to resume with, lowered
        tenfold); ``TrainingDiverged`` naming the last good checkpoint when none is left."""
        if state.rollbacks >= self.train.max_rollbacks or not self.last.exists():
            kept = (
                f"last good checkpoint: {self.last} (step {load_checkpoint(self.last)['state']['step']})"
                if self.last.exists()
                else "no checkpoint was written yet"
            )
            raise TrainingDiverged(
                f"training diverged: {reason}; {kept}. Lower train.lr (now {self.train.lr}) "
                f"or train.grad_clip (now {self.train.grad_clip})."
            )
        return state.rollbacks + 1, state.lr_scale * 0.1

    def rolled_back(self, reason: str, state: TrainState, at: int) -> None:
        log.warning(
            "%s: rolled back to step %d of %s with the LR scale lowered to %.3g (rollback %d of %d)",
            reason,
            state.step,
            self.last,
            state.lr_scale,
            state.rollbacks,
            self.train.max_rollbacks,
        )

    def out_of_memory(self, err: torch.cuda.OutOfMemoryError, state: TrainState, updater: Updater) -> None:
        """A CUDA out-of-memory step: the update's memory released and the batch halved (``err`` raised again under
        DDP, whose ranks must agree on the batch, or when the batch cannot shrink)."""
        if distributed.context().enabled or state.batch_size < 2:
            raise err
        updater.release()
        torch.cuda.empty_cache()
        state.batch_size //= 2
        log.warning("CUDA out of memory at step %d: batch size halved to %d", state.step, state.batch_size)

    def stopped_mid_step(
        self, signal: str, exit_code: int, err: Exception, step: int, save_last: Callable[[], str | None] | None
    ) -> Interrupted:
        """A signalled run whose step under way failed (a SIGTERM to the process group also kills the loader's
        workers): the stop at the last completed step, ``step``, with its ``last.pt`` written by ``save_last``, or,
        if the failure came inside the update (``save_last`` None), with the ``last.pt`` already written (its
        weights and counters agree)."""
        cause = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:160]}"
        if save_last is not None and not save_last():
            return Interrupted(
                f"interrupted by {signal} at step {step} (the step under way stopped with it: {cause}): "
                f"{self.last} saved",
                exit_code,
                saved_step=step,
            )
        kept_step = load_checkpoint(self.last)["state"]["step"] if self.last.exists() else None
        kept = f"{self.last} (step {kept_step}) kept" if kept_step is not None else "no checkpoint yet"
        return Interrupted(
            f"interrupted by {signal} in step {step + 1} ({cause}): {kept}", exit_code, saved_step=kept_step
        )
