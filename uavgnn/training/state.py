"""What a training run carries between steps and returns: counters saved in every checkpoint, the result."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from uavgnn.reporting.figures import Score


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
