"""The phases of a run (``Algorithm.phases``: imitation, then REINFORCE from its best policy): which one a step
is in, its learning rate, and the restart at a phase's first step.

A phase restarts from the best policy so far (``best.pt``'s, as ``algorithm.init_from=<best.pt>`` would) with
fresh optimisers, moving average and log window, at its own LR schedule counted from its first step: the run is
then the same as one run per phase, each started from the previous one's ``best.pt`` (tested weight for weight).
The restart happens when the phase's first step is about to run, so a run resumed at the boundary (``last.pt``
is written there) makes it just as an uninterrupted one does; making it twice (a CUDA out-of-memory retry, a
stop inside that step) gives the same state. The LR scale starts again at 1, lowered tenfold for each rollback
the run has had.
"""

from __future__ import annotations

import torch

from uavgnn.algorithms.base import Phase
from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.console import echo
from uavgnn.runs.checkpoints import load_checkpoint, load_weights
from uavgnn.runs.layout import BEST
from uavgnn.training.optimisers import Optimisers
from uavgnn.training.schedule import lr_factor
from uavgnn.training.step_stats import StepStats


def phase_at(phases: list[Phase], step: int) -> Phase:
    """The phase step ``step`` belongs to (the last one from its start on)."""
    return next((phase for phase in phases if step < phase.end), phases[-1])


def phase_lr(phases: list[Phase], step: int, schedule: str) -> tuple[float, float]:
    """(peak LR, schedule factor) of step ``step``: its phase's warmup and schedule, counted from the phase's start."""
    phase = phase_at(phases, step)
    return phase.lr, lr_factor(step - phase.start, phase.end - phase.start, phase.warmup, schedule)


class Phases:
    """Mixed into ``Trainer``: uses its config, algorithm, model, moving average, state and workload."""

    def start_phase(self, phase: Phase) -> None:
        """``phase``'s first step is next: restart from the best policy so far with fresh optimisers (see the
        module's docstring)."""
        best = self.out_dir / BEST
        main = self.ctx.is_main
        weights = distributed.broadcast_from_main(  # from the host: other ranks would unpickle them onto cuda:0
            load_checkpoint(best, "cpu")["policy"] if main and best.exists() else None
        )
        if weights is not None:
            load_weights(self.model, weights, best, f"the best policy before phase {phase.name}")
        cfg = self.cfg
        self.optimisers = Optimisers(
            self.algorithm.networks(self.model),
            phase.lr,
            cfg.train.weight_decay,
            cfg.train.grad_clip,
            capturable=self.graphed is not None,
        )
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.scaler.is_enabled())
        if self.ema is not None:
            self.ema.module.load_state_dict(self.model.state_dict())
            self.ema.n_averaged.zero_()  # the first update copies the weights, as in a new run
        state = self.state
        state.lr_scale, state.evals_without_improvement, state.bad_steps = 0.1**state.rollbacks, 0, 0
        self.unread = StepStats(self.device)
        self.window = dict.fromkeys(self.window, 0.0)
        self.work.restart(state.step, state.batch_size)
        source = (
            f"the best policy so far ({self.score.key} {state.best:.4f})"
            if weights is not None
            else "the current weights (no best.pt yet)"
        )
        if main:
            echo(f"step {state.step}: phase {phase.name} starts from {source}")
            self.logger.event(f"phase {phase.name}", state.step, best=state.best)
