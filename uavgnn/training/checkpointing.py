"""A training run's checkpoints: ``last.pt`` and ``best.pt`` hold everything the run needs to continue with no lost
or repeated step (weights, moving average, optimisers, scaler, the algorithm's and the workload's state,
counters, RNG, the log window), written only from healthy weights, read back part by part.

``Checkpointer`` owns the norm of the last healthy weights: what "the weights blew up" is measured by. Under
``torchrun`` rank 0 writes the checkpoint and each other rank its own workload state beside it.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel

from uavgnn.algorithms.base import Algorithm, Workload
from uavgnn.algorithms.registry import describe
from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.errors import CheckpointError
from uavgnn.runs.checkpoints import (
    load_checkpoint,
    load_part,
    load_weights,
    rank_data_path,
    rng_state,
    save_checkpoint,
    save_part,
    set_rng_state,
    weights_norm,
    weights_problem,
)
from uavgnn.runs.layout import LAST
from uavgnn.training.curriculum import CurriculumState
from uavgnn.training.state import TrainState
from uavgnn.training.update import Updater


class Checkpointer:
    """Writes and restores the run's checkpoints (see the module's docstring)."""

    def __init__(
        self,
        cfg: Any,
        model: nn.Module,
        ema: AveragedModel | None,
        updater: Updater,
        algorithm: Algorithm,
        work: Workload,
    ) -> None:
        self.cfg, self.model, self.ema, self.updater, self.algorithm, self.work = (
            cfg,
            model,
            ema,
            updater,
            algorithm,
            work,
        )
        self.device, self.ctx = updater.device, distributed.context()
        self.good_norm = 0.0  # of the last healthy checkpoint (``trust``)

    @property
    def policy(self) -> nn.Module:
        """What is evaluated, checkpointed and shipped: the moving average of the weights, or the weights."""
        return self.ema.module if self.ema is not None else self.model

    def trust(self) -> None:
        """The weights as they are now are healthy (a fresh start, a restore): later norms are measured by them."""
        self.good_norm = weights_norm(self.model)

    def save(self, path: Path, state: TrainState, window: dict[str, float], history_rows: int) -> str | None:
        """Write ``path`` if the weights are healthy (the same verdict on every rank), else say what is wrong."""
        norm = weights_norm(self.model)
        problem = weights_problem(norm, self.good_norm) or weights_problem(weights_norm(self.policy), self.good_norm)
        if problem:
            return problem
        self.good_norm = norm
        data = self.work.state_dict() if path.name == LAST else {}  # environments, replay: what resume needs
        if self.ctx.enabled and not self.ctx.is_main and data:  # each rank's own environments and buffer
            save_part(rank_data_path(path, self.ctx.rank), data)
        if self.ctx.is_main:
            save_checkpoint(
                path,
                {
                    "model": self.model.state_dict(),
                    "policy": self.policy.state_dict(),
                    "ema": self.ema.state_dict() if self.ema is not None else None,
                    "optimizer": self.updater.optimisers.state_dict(),
                    "scaler": self.updater.scaler.state_dict(),
                    "algorithm": self.algorithm.state_dict(),
                    "state": asdict(state),
                    "rng": rng_state(),
                    "data": data,
                    "window": dict(window),
                    "history_rows": history_rows,
                    **self.work.checkpoint_extras(),
                },
                self.cfg,
            )
        return None

    def restore(self, path: Path, worst: float) -> tuple[TrainState, CurriculumState, dict[str, float]]:
        """Everything ``path`` holds (resume and rollback): weights, optimiser, algorithm, workload, RNG; returns the
        counters, the curriculum and the log window. Each part goes through ``load_weights``: one that does not
        fit is a one-line error naming it; ``worst``: the best score of a checkpoint saved before it was kept."""
        ckpt = load_checkpoint(path, self.device)
        config = describe(ckpt["config"])
        load_weights(self.model, ckpt["model"], path, config)
        load_weights(self.updater.optimisers, ckpt["optimizer"], path, config, "optimiser state")
        load_weights(self.updater.scaler, ckpt["scaler"], path, config, "gradient-scaler state")
        if self.ema is not None:
            load_weights(self.ema, ckpt["ema"], path, config, "moving-average weights")
        load_weights(self.algorithm, ckpt.get("algorithm", {}), path, config, "algorithm state")
        own = rank_data_path(path, self.ctx.rank)
        data = load_part(own, self.device) if self.ctx.rank > 0 and own.exists() else ckpt.get("data", {})
        load_weights(self.work, data, path, config, "environment and replay state")
        try:
            saved = dict(ckpt["state"])
            saved.setdefault("best", saved.pop("best_gap", worst))  # the best score's name in older checkpoints
            state = TrainState(**saved)
            curriculum = CurriculumState(**state.curriculum)
            set_rng_state(ckpt["rng"])
        except (KeyError, TypeError, ValueError, RuntimeError) as err:
            raise CheckpointError(
                f"checkpoint {path} ({config}): its training counters do not fit this version "
                f"({type(err).__name__}: {err})"
            ) from None
        return state, curriculum, ckpt.get("window", {})

    def best_policy(self, best: Path) -> dict[str, torch.Tensor] | None:
        """The policy of ``best`` (the best so far), on every rank, from the host (other ranks would unpickle it onto
        cuda:0); None before there is one."""
        weights = load_checkpoint(best, "cpu")["policy"] if self.ctx.is_main and best.exists() else None
        return distributed.broadcast_from_main(weights)
