"""One training update - the algorithm's forward and loss, backward, clipping, the optimisers' step - as one
function of the step's batch and draws, with no host read: what the loop calls each step and what
``optim.cuda_graphs`` captures as one CUDA graph (``uavgnn.training.cuda_graphs``)."""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.device import autocast
from uavgnn.training.cuda_graphs import GraphedUpdate, cuda_graphs_refusal

log = logging.getLogger(__name__)


@dataclass
class Update:
    logged: torch.Tensor  # the step's loss (the batch's mean over the ranks), detached
    stats: dict[str, torch.Tensor]  # the algorithm's statistics
    applied: torch.Tensor  # device bool: the optimisers moved the weights (loss and gradients finite)
    feedback: torch.Tensor | None  # per-item values for the data source (replay priorities)
    stop_seen: bool  # under DDP: a rank saw a stop signal


class Updates:
    """Mixed into ``Trainer``: uses its config, device, algorithm, step functions, optimisers and scaler."""

    def graph_updates(self) -> GraphedUpdate | None:
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

    def update(self, batch: Any, draws: Any, stop_seen: bool = False, capturing: bool = False) -> Update:
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
        self.updating = True  # from here to the new step count the weights and the counters disagree
        applied = self.optimisers.step(self.scaler, finite)  # each network clipped to its own norm
        return Update(logged, stats, applied, out.feedback, stop_seen)
