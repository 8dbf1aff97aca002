"""The learning rate of a step: a pure function of (settings, step), so a resumed or rolled-back run repeats it."""

from __future__ import annotations

import math


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
