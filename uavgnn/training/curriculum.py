"""Curriculum over scene size: stages, advancing, falling back, replay, and the batch size of a stage.

Stage performance is ``1 - optimality_gap`` on the stage's own validation
scenes. The gap is measured against the MILP optimum of the same scenes, so
it is comparable across sizes (a 4-UAV scene and a 16-UAV scene both score 1
when solved exactly), and it is the number the project is judged on;
``completion_score`` ignores travel cost and saturates early.

- advance when performance >= ``advance_threshold`` for
  ``consecutive_evaluations`` evaluations in a row, or after ``patience``
  evaluations in the stage;
- fall back one stage when performance < ``performance_threshold`` x the
  performance the previous stage was left with, ``consecutive_failures``
  times in a row (at most ``max_fallbacks`` times; the LR is multiplied by
  ``learning_rate_decay`` each time);
- replay: a ``replay[stage]`` fraction of every batch comes from the scenes of
  earlier stages (``uavgnn.data.stages``: the stage's batches and their size).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

log = logging.getLogger(__name__)
ADVANCE, FALLBACK = "advance", "fallback"


@dataclass
class CurriculumState:
    """Where the curriculum stands; saved in every checkpoint (``TrainState.curriculum``)."""

    stage: int = 0
    evals_in_stage: int = 0
    passes: int = 0  # consecutive evaluations at or above advance_threshold
    failures: int = 0  # consecutive evaluations below performance_threshold x the previous stage's
    fallbacks: int = 0
    advances: int = 0
    left_with: list[float] = field(default_factory=list)  # performance each stage was last left with


def update_curriculum(cfg, state: CurriculumState, performance: float) -> str | None:
    """Account one evaluation of the current stage; returns ``advance``, ``fallback`` or None."""
    state.evals_in_stage += 1
    if state.stage > 0 and performance < cfg.performance_threshold * state.left_with[state.stage - 1]:
        state.failures += 1
    else:
        state.failures = 0
    if state.failures >= cfg.consecutive_failures and state.fallbacks < cfg.max_fallbacks:
        state.stage -= 1
        state.fallbacks += 1
        _enter(state)
        return FALLBACK
    state.passes = state.passes + 1 if performance >= cfg.advance_threshold else 0
    last = len(cfg.stages) - 1
    if state.stage < last and (state.passes >= cfg.consecutive_evaluations or state.evals_in_stage >= cfg.patience):
        state.left_with[state.stage :] = [performance]
        state.stage += 1
        state.advances += 1
        _enter(state)
        return ADVANCE
    return None


def _enter(state: CurriculumState) -> None:
    state.evals_in_stage = state.passes = state.failures = 0


def curriculum_step(
    cfg, state: CurriculumState, performance: float, sizes: list[int], logger, step: int, lr_scale: float
) -> float:
    """After an evaluation: move the curriculum, log what happened; returns the LR scale (lowered on a fallback)."""
    event = update_curriculum(cfg, state, performance)
    if event == FALLBACK:
        lr_scale *= cfg.learning_rate_decay
    if event is not None:
        logger.event(
            event, step, stage=state.stage, n_uav=sizes[state.stage], performance=performance, lr_scale=lr_scale
        )
        log.info("curriculum %s at step %d: stage %d (%d UAVs)", event, step, state.stage, sizes[state.stage])
    logger.log(
        {
            "curriculum/stage": state.stage,
            "curriculum/n_uav": sizes[state.stage],
            "curriculum/advances": state.advances,
            "curriculum/fallbacks": state.fallbacks,
        },
        step,
    )
    return lr_scale
