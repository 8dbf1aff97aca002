"""Step anatomy: what a training step asks of the device, counted on any device (``mode=profile``,
``benchmarks/step_anatomy.py``).

A real training run of the configured algorithm, with no log line, evaluation or checkpoint until its end;
after ``warmup`` steps, the next ``steps`` calls of ``Trainer.train_step`` (collection, batch, forward, loss,
backward, optimisers, moving average: everything between two log points) run under an ``OpCounter``. On a GPU
each aten op but a view is at least one kernel launch and each sync op drains the queue: ops per step say how
much a step waits on Python, syncs per step whether the device can run ahead at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from uavgnn.infrastructure.perf import CompileCounter, OpCounter
from uavgnn.loggers import MetricLogger
from uavgnn.training.trainer import Trainer


@dataclass
class Anatomy:
    algorithm: str
    ops_per_step: float  # aten ops dispatched per training step
    syncs_per_step: float  # of those, ops that make the host wait for the device
    views_per_step: float = 0.0  # of those, ops that only alias a tensor (no kernel on a GPU)
    compiles: int = 0  # with optim.compile: frames TorchDynamo compiled over the run (recompiles included)
    graph_breaks: int = 0  # with optim.compile: graph breaks met over the run (0: the step is one graph)
    sync_sites: dict[str, int] = field(default_factory=dict)  # "op at file:line" -> count (with trace=True)
    ops: dict[str, int] = field(default_factory=dict)  # op name -> count over the counted steps
    functions: dict[str, int] = field(default_factory=dict)  # "module.py:function" -> ops (with by_function=True)


def step_anatomy(
    cfg: Any, out_dir: Path, warmup: int = 3, steps: int = 10, trace: bool = False, by_function: bool = False
) -> Anatomy:
    """Count the ops of ``steps`` training steps after ``warmup`` of a run of ``cfg`` (written to ``out_dir``).
    With ``optim.compile`` TorchDynamo's caches are reset first, so that the compiles counted are this run's as
    in a fresh process (a step compiled by an earlier run of the process recompiles on its guards: 4 frames
    instead of 1 for a padded imitation run after a plain one)."""
    total = warmup + steps
    if cfg.optim.compile:
        torch._dynamo.reset()
    cfg = OmegaConf.merge(
        cfg,
        {
            "train": {"steps": total, "log_every": total, "eval_every": total, "ckpt_every": total},
            "logger": {"name": "none"},
        },
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(cfg, out_dir)
    counter, step = OpCounter(trace_syncs=trace, trace_ops=by_function), trainer.train_step

    def counted_step(*args: Any) -> Any:
        if trainer.state.step < warmup:
            return step(*args)
        with counter:
            return step(*args)

    trainer.train_step = counted_step
    logger = MetricLogger(out_dir, cfg.logger, config={})
    try:
        with CompileCounter() as compiled:
            trainer.fit(logger)
    finally:
        logger.finish()
    return Anatomy(
        cfg.algorithm.name,
        counter.ops / steps,
        counter.syncs / steps,
        counter.views / steps,
        compiled.compiles,
        compiled.graph_breaks,
        dict(counter.where),
        dict(counter.counts),
        dict(counter.functions),
    )
