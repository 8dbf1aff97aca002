"""What an algorithm is to the shared training loop (``uavgnn.training.trainer.Trainer``).

The Trainer owns everything algorithms share: device and precision, DDP,
compile, EMA, the optimiser and LR schedule, checkpoints and resume,
evaluation cadence, logging, OOM halving, divergence rollback, signals and
progress. An algorithm owns one thing: the loss of a batch. ``mode=profile``,
``mode=benchmark`` and ``hardware.batch_size=auto`` call the same
``training_step``, so they measure the step that actually trains.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch_geometric.data import Batch

from uavgnn.runtime import autocast

LossOf = Callable[[nn.Module, Batch, int], torch.Tensor]  # (model, batch, k) -> a training step's loss


@dataclass
class StepOutput:
    loss: torch.Tensor  # scalar to minimise
    stats: dict[str, torch.Tensor]  # scalars logged as train/<name> (window means)
    weight: torch.Tensor  # how many items (UAVs) the loss averages over: DDP weighs the ranks by it
    feedback: torch.Tensor | None = None  # per-item values for the data source (replay priorities)


class Algorithm(ABC):
    """One objective, readable top to bottom in its own file; registered in ``uavgnn.algorithms.ALGORITHMS``."""

    @abstractmethod
    def training_step(self, model: nn.Module, batch: Batch, k: int, step: int) -> StepOutput:
        """The loss of ``batch`` at candidate budget ``k``; a pure function of (weights, batch, step),
        so a resumed run repeats exactly what an uninterrupted one computes."""

    def param_groups(self, model: nn.Module) -> list[dict[str, Any]]:
        """The optimiser's parameter groups; each group's LR is ``train.lr`` x its ``lr_scale`` x the schedule."""
        return [{"params": list(model.parameters()), "lr_scale": 1.0}]

    def after_step(self, model: nn.Module) -> None:
        """Called after each optimiser step (e.g. target-network averaging); nothing by default."""

    def state_dict(self) -> dict[str, Any]:
        """What this algorithm adds to a checkpoint (its own buffers, counters); nothing by default."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (resume and rollback)."""


def step_loss(algorithm: Algorithm, device: torch.device, dtype: torch.dtype | None) -> LossOf:
    """The algorithm's loss under autocast, as ``hardware.batch_size=auto``, ``mode=profile`` and
    ``mode=benchmark`` measure it (at step 0: what they time does not depend on the step)."""

    def loss_of(model: nn.Module, batch: Batch, k: int) -> torch.Tensor:
        with autocast(device, dtype):
            return algorithm.training_step(model, batch, k, 0).loss

    return loss_of
