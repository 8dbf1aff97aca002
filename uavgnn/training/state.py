"""What a training run carries between steps and returns: counters saved in every checkpoint, the result."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from uavgnn.reporting.figures import Score

log = logging.getLogger(__name__)


@dataclass
class TrainState:
    """Counters that must survive a resume (saved in every checkpoint)."""

    step: int = 0
    lr_scale: float = 1.0  # lowered by plateaus, non-finite losses and rollbacks
    best: float = math.inf  # the best validation score so far (the algorithm's ``score``: a gap, an RMSE, ...)
    evals_without_improvement: int = 0
    bad_steps: int = 0
    rollbacks: int = 0  # returns to the last good checkpoint after a divergence
    batch_size: int = 0  # the global batch in use (chosen by batch_size=auto, halved on CUDA OOM); 0 = not set
    curriculum: dict[str, Any] = field(default_factory=dict)
    last_val: dict[str, float] = field(
        default_factory=dict
    )  # the latest validation: a run resumed at its end reports it

    def validated(self, value: float, score: Score, final_stage: bool, plateau_patience: int | None) -> bool:
        """A validation's ``value`` of ``score``: whether it is a new best at the final stage (smaller stages' scores
        are not comparable: ``best.pt`` is then written, and ``improved``); else, at the final stage, one more
        validation without improvement. A non-finite value changes nothing but is said."""
        if not math.isfinite(value):
            log.warning("validation %s is %s at step %d: best.pt kept as it is", score.key, value, self.step)
            return False
        if final_stage and score.improves(value, self.best):
            return True
        if final_stage:
            self.not_improved(plateau_patience)
        return False

    def improved(self, best: float) -> None:
        self.best, self.evals_without_improvement = best, 0

    def not_improved(self, plateau_patience: int | None) -> None:
        """A validation at the final stage that did not improve; with a plateau schedule (its patience), the LR
        lowered by a fifth after that many in a row."""
        self.evals_without_improvement += 1
        if plateau_patience is not None and self.evals_without_improvement >= plateau_patience:
            self.lr_scale *= 0.8
            self.evals_without_improvement = 0

    def start_phase(self) -> None:
        """A phase's first step: the LR scale at 1, lowered tenfold for each rollback the run has had."""
        self.lr_scale, self.evals_without_improvement, self.bad_steps = 0.1**self.rollbacks, 0, 0


@dataclass
class StepDone:
    """What the loop learns of a step on the host (its values stay on the device)."""

    stats: list[str]  # the algorithm's stat names, summed into the log window
    stopping: bool  # a signal asked the run to stop (agreed by every rank)


@dataclass
class TrainResult:
    model: nn.Module  # the networks the algorithm built (the policy evaluated and shipped)
    state: TrainState
    score: Score  # the validation metric behind ``state.best``: its name and direction
    best_path: Path
    last_path: Path
    val: dict[str, float]
    perf: dict[str, float]  # median perf/graphs_per_s of the run and its peak memory
    workload: Any = None  # the data side it trained on (test phases reuse its splits and scoring)
