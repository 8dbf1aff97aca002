"""What changes with the step: the learning rate and the training-time candidate budget k.

Both are pure functions of (settings, seed, step), so a resumed or rolled-back run repeats them exactly.
"""

from __future__ import annotations

import math

import numpy as np


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
