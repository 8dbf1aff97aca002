"""One training update - the algorithm's forward and loss, backward, clipping, the optimisers' step - as one
function of the step's batch and draws, with no host read: what the loop calls each step and what
``optim.cuda_graphs`` captures as one CUDA graph (``uavgnn.training.cuda_graphs``).

``Updater`` owns what an update needs: the algorithm's step as a module (DDP-wrapped under ``torchrun``, compiled
with ``optim.compile``), one optimiser per network, the gradient scaler and the CUDA graphs of the update.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from uavgnn.algorithms.base import Algorithm, AlgorithmStep
from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.device import autocast, maybe_compile
from uavgnn.training.cuda_graphs import GraphedUpdate, cuda_graphs_refusal
from uavgnn.training.optimisers import Optimisers

log = logging.getLogger(__name__)


@dataclass
class UpdateResult:
    logged: torch.Tensor  # the step's loss (the batch's mean over the ranks), detached
    stats: dict[str, torch.Tensor]  # the algorithm's statistics
    applied: torch.Tensor  # device bool: the optimisers moved the weights (loss and gradients finite)
    feedback: torch.Tensor | None  # per-item values for the data source (replay priorities)
    stop_seen: bool  # under DDP: a rank saw a stop signal


class Updater:
    """``updater(batch, draws, stop_seen)`` updates the weights once; ``updating`` is true from the backward to the
    loop's new step count, while the weights and the counters disagree."""

    def __init__(
        self, cfg: Any, algorithm: Algorithm, model: nn.Module, device: torch.device, dtype: torch.dtype | None
    ) -> None:
        self.cfg, self.algorithm, self.model, self.device, self.dtype = cfg, algorithm, model, device, dtype
        self.ctx = distributed.context()
        self.scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
        self.graphed = self._graphs()  # optim.cuda_graphs: the update replayed as one CUDA graph
        self.optimisers = self._optimisers(cfg.train.lr)
        self.eager: nn.Module | None = None  # the step as a module, and what runs it (compiled or not): ``wrap``
        self.step_fn: Any = None
        self.updating = False

    def _optimisers(self, lr: float) -> Optimisers:
        train = self.cfg.train
        return Optimisers(
            self.algorithm.networks(self.model),
            lr,
            train.weight_decay,
            train.grad_clip,
            capturable=self.graphed is not None,
        )

    def _graphs(self) -> GraphedUpdate | None:
        """The CUDA-graph replay of ``update`` when ``optim.cuda_graphs`` asks for it and it can run here;
        otherwise None, said in one line when it was asked for."""
        if not self.cfg.optim.cuda_graphs:
            return None
        refusal = cuda_graphs_refusal(
            self.device, self.ctx.enabled, self.scaler.is_enabled(), self.cfg.optim.grad_checkpoint
        )
        if refusal:
            log.info("optim.cuda_graphs: off (%s): the update launches its kernels one by one", refusal)
            return None
        return GraphedUpdate(self.update, lambda: self.optimisers, self.device)

    def wrap(self) -> None:
        """The algorithm's step as a module (its loss is the forward), once the weights are final (a resumed run's
        restored): DDP broadcasts rank 0's weights at construction and averages the gradients of that forward in
        backward; ``optim.compile`` compiles it whole (forward and loss)."""
        stepper = AlgorithmStep(self.model, self.algorithm)
        self.eager = torch.nn.parallel.DistributedDataParallel(stepper) if self.ctx.enabled else stepper
        self.step_fn = maybe_compile(self.eager, self.cfg.optim.compile)

    def restart(self, lr: float) -> None:
        """Fresh optimisers (at ``lr``) and gradient scaler: a phase's start."""
        self.optimisers = self._optimisers(lr)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.scaler.is_enabled())

    def release(self) -> None:
        """After a CUDA out-of-memory step: no gradients left, no graphs of the larger batch holding memory."""
        self.optimisers.zero_grad()
        if self.graphed is not None:
            self.graphed.reset()

    def __call__(self, batch: Any, draws: Any, stop_seen: bool = False) -> UpdateResult:
        return self.graphed(batch, draws, stop_seen) if self.graphed else self.update(batch, draws, stop_seen)

    def algorithm_step(self, batch: Any, draws: Any, capturing: bool = False) -> Any:
        """The algorithm's loss under autocast (without its cast cache when CUDA graphs capture the update, as
        capture requires, and in their eager steps too: a compiled step's guards see the setting); a compiled
        step that fails falls back to eager once."""
        with autocast(self.device, self.dtype, cache=self.graphed is None):
            try:
                return self.step_fn(batch, draws)
            except torch.cuda.OutOfMemoryError:
                raise
            except Exception as err:  # noqa: BLE001 - compilation errors surface at the first call
                if self.step_fn is self.eager or capturing:  # a capture's failure is GraphedUpdate's to handle
                    raise
                warnings.warn(
                    f"optim.compile: compiled step failed ({type(err).__name__}: {err}); continuing in eager mode",
                    RuntimeWarning,
                    stacklevel=2,
                )
                self.step_fn = self.eager
                return self.step_fn(batch, draws)

    def update(self, batch: Any, draws: Any, stop_seen: bool = False, capturing: bool = False) -> UpdateResult:
        """Forward, loss, backward, clip and step each network's optimiser; the gradients are cleared first
        unless a CUDA graph is ``capturing`` it (its backward then writes them afresh at each replay)."""
        out = self.algorithm_step(batch, draws, capturing)
        if not capturing:
            self.optimisers.zero_grad()
        loss, logged, stats = out.loss, out.loss.detach(), out.stats
        finite = logged.abs() < math.inf  # isfinite in two ops, not four
        if self.ctx.enabled:
            loss, logged, stats, finite, stop_seen = distributed.agree_on_step(
                out.loss, out.weight, out.stats, stop_seen
            )
            self.scaler.scale(loss).backward()  # DDP reduces the gradients from AccumulateGrad's hooks
        else:
            self.optimisers.backward(self.scaler.scale(loss))
        self.updating = True
        applied = self.optimisers.step(self.scaler, finite)  # each network clipped to its own norm
        return UpdateResult(logged, stats, applied, out.feedback, stop_seen)
