"""Training objectives that plug into the shared loop: ``algorithm=imitation|reinforce``.

To add one: a file here with a subclass of ``Algorithm`` (see ``base.py``),
an entry in ``make_algorithm``, a ``conf/algorithm/<name>.yaml`` and its name
in ``uavgnn.validation.CHOICES``.
"""

from __future__ import annotations

import torch

from uavgnn.algorithms.base import Algorithm, LossOf, StepOutput, step_loss
from uavgnn.algorithms.imitation import Imitation
from uavgnn.algorithms.reinforce import Reinforce

__all__ = ["Algorithm", "LossOf", "StepOutput", "make_algorithm", "step_loss"]


def make_algorithm(cfg, device: torch.device) -> Algorithm:
    """The configured ``algorithm.name`` with its settings."""
    if cfg.algorithm.name == "imitation":
        return Imitation()
    if cfg.algorithm.name == "reinforce":
        return Reinforce(cfg.algorithm.samples, cfg.algorithm.imitation_weight, cfg.seed, device)
    raise ValueError(f"algorithm.name: unknown algorithm {cfg.algorithm.name!r} (expected imitation or reinforce)")
