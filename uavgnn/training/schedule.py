"""The learning rate of a step: a pure function of (settings, step), so a resumed or rolled-back run repeats it.

A run has phases (``Algorithm.phases``: imitation, then REINFORCE from its best policy), each with its own peak LR,
warmup and schedule counted from its first step. At a phase's first step the loop restarts from the best policy
so far (``best.pt``'s, as ``algorithm.init_from=<best.pt>`` would) with fresh optimisers, moving average and log
window: the run is then the same as one run per phase, each started from the previous one's ``best.pt`` (tested
weight for weight). The restart happens when the phase's first step is about to run, so a run resumed at the
boundary (``last.pt`` is written there) makes it just as an uninterrupted one does; making it twice (a CUDA
out-of-memory retry, a stop inside that step) gives the same state. The LR scale starts again at 1, lowered
tenfold for each rollback the run has had.
"""

from __future__ import annotations

import math

from uavgnn.algorithms.base import Phase


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


def phase_at(phases: list[Phase], step: int) -> Phase:
    """The phase step ``step`` belongs to (the last one from its start on)."""
    return next((phase for phase in phases if step < phase.end), phases[-1])


def phase_lr(phases: list[Phase], step: int, schedule: str) -> tuple[float, float]:
    """(peak LR, schedule factor) of step ``step``: its phase's warmup and schedule, counted from the phase's start."""
    phase = phase_at(phases, step)
    return phase.lr, lr_factor(step - phase.start, phase.end - phase.start, phase.warmup, schedule)
