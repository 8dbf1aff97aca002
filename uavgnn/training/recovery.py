"""What the Trainer does when a step goes wrong: roll back, skip, or shrink the batch, and say so.

- a non-finite loss or gradient: the step's update is skipped on the device, and
  at the next read of the steps (a log line) the LR is halved for each such
  step; ``train.max_bad_steps`` in a row count as a divergence;
- a divergence (or weights that blew up, caught before any checkpoint is
  written): back to the last good ``last.pt`` with the LR lowered tenfold, at
  most ``train.max_rollbacks`` times, then ``TrainingDiverged`` naming the
  last good checkpoint;
- CUDA out of memory: the batch is halved and the same step is tried again.
"""

from __future__ import annotations

import logging

import torch

from uavgnn.infrastructure.errors import Interrupted, TrainingDiverged
from uavgnn.runs.checkpoints import load_checkpoint, weights_norm
from uavgnn.runs.layout import LAST

log = logging.getLogger(__name__)


class Recovery:
    """Mixed into ``Trainer``: uses its state, logger, progress bar, batch source and ``restore``."""

    def roll_back(self, reason: str) -> None:
        """Divergence: back to the last good ``last.pt`` with the LR lowered tenfold, or stop with
        ``TrainingDiverged`` when no rollback is left."""
        last = self.out_dir / LAST
        if self.state.rollbacks >= self.cfg.train.max_rollbacks or not last.exists():
            self.bar.close()
            kept = (
                f"last good checkpoint: {last} (step {load_checkpoint(last)['state']['step']})"
                if last.exists()
                else "no checkpoint was written yet"
            )
            raise TrainingDiverged(
                f"training diverged: {reason}; {kept}. Lower train.lr (now {self.cfg.train.lr}) "
                f"or train.grad_clip (now {self.cfg.train.grad_clip})."
            )
        rollbacks, lr_scale, at = self.state.rollbacks + 1, self.state.lr_scale * 0.1, self.state.step
        self.restore(last)
        self.good_norm = weights_norm(self.model)
        self.state.rollbacks, self.state.lr_scale = rollbacks, lr_scale
        self.logger.truncate(self.state.step)
        self.logger.event("rollback", self.state.step, reason=reason, from_step=at, lr_scale=lr_scale)
        log.warning(
            "%s: rolled back to step %d of %s with the LR scale lowered to %.3g (rollback %d of %d)",
            reason,
            self.state.step,
            last,
            lr_scale,
            rollbacks,
            self.cfg.train.max_rollbacks,
        )
        self.bar.reset(total=self.cfg.train.steps)
        self.bar.update(self.state.step)  # the log window is the checkpoint's, as the history's kept rows are
        self.work.restart(self.state.step, self.state.batch_size)

    def stop_mid_step(self, stop, err: Exception) -> None:
        """A signalled run whose step under way failed (a SIGTERM to the process group also kills the loader's
        workers): stop at the last completed step with its ``last.pt``, or, if the failure came inside the
        update, keep the ``last.pt`` already written (its weights and counters agree)."""
        self.bar.close()
        cause = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:160]}"
        last = self.out_dir / LAST
        if not self.updating and not self.checkpoint(last):
            raise Interrupted(
                f"interrupted by {stop.requested} at step {self.state.step} (the step under way stopped "
                f"with it: {cause}): {last} saved",
                stop.exit_code,
                saved_step=self.state.step,
            )
        kept_step = load_checkpoint(last)["state"]["step"] if last.exists() else None
        kept = f"{last} (step {kept_step}) kept" if kept_step is not None else "no checkpoint yet"
        raise Interrupted(
            f"interrupted by {stop.requested} in step {self.state.step + 1} ({cause}): {kept}",
            stop.exit_code,
            saved_step=kept_step,
        )

    def read_steps(self) -> bool:
        """The one host read of the steps since the last: their loss and stats into the log window, and the
        verdict on those whose update was not applied (non-finite): the LR halved for each, a rollback after
        ``max_bad_steps`` in a row. Returns False when it rolled back."""
        skipped, run, worst = self.read_window()
        self.state.bad_steps = run
        return self.skip_non_finite(skipped, worst) if skipped else True

    def skip_non_finite(self, skipped: int, worst: int) -> bool:
        """``skipped`` steps since the last read had a non-finite loss or gradient (their updates were not
        applied), at most ``worst`` in a row: halve the LR for each, roll back after ``train.max_bad_steps`` in
        a row. Returns False when it rolled back."""
        state = self.state
        state.lr_scale *= 0.5**skipped
        log.warning(
            "non-finite loss or gradients in %d step(s) before step %d (at most %d in a row): their updates "
            "skipped, LR scale now %.3g",
            skipped,
            state.step,
            worst,
            state.lr_scale,
        )
        if worst >= self.cfg.train.max_bad_steps:
            self.roll_back(f"{worst} non-finite losses in a row before step {state.step}")
            return False
        return True

    def out_of_memory(self, err: torch.cuda.OutOfMemoryError) -> None:
        """CUDA OOM in a step: halve the batch, free the cache, log it, and go on from the same step."""
        if self.ctx.enabled or self.state.batch_size < 2:
            raise err
        self.optimisers.zero_grad()
        if self.graphed is not None:
            self.graphed.reset()  # the graphs of the larger batch hold their memory
        torch.cuda.empty_cache()
        self.state.batch_size //= 2
        log.warning("CUDA out of memory at step %d: batch size halved to %d", self.state.step, self.state.batch_size)
        self.logger.log({"hardware/batch_size": self.state.batch_size}, self.state.step)
        self.work.restart(self.state.step, self.state.batch_size)
