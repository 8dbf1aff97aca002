"""``optim.compile`` compiles each algorithm's whole step - forward and loss as one TorchDynamo graph
(AOTAutograd then compiles its backward) - that gives the eager step's loss and gradients and is compiled again
only when a curriculum stage changes the shapes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch._dynamo
from conftest import SMALLEST, compose_small

from uavgnn.infrastructure.perf import CompileCounter
from uavgnn.loggers import MetricLogger
from uavgnn.training.anatomy import step_anatomy
from uavgnn.training.trainer import Trainer


def first_step(tmp_path: Path, algorithm: str, *extra: str) -> tuple[Trainer, object, object]:
    """A trainer of ``algorithm`` at its smallest, with the batch and draws of its first step."""
    cfg = compose_small(tmp_path, algorithm, *extra)
    (tmp_path / "run").mkdir()
    trainer = Trainer(cfg, tmp_path / "run")
    if trainer.cadence.updates:
        trainer.work.collect(0)
    batch = trainer.work.batch(0, 0, trainer.state.batch_size)
    return trainer, batch, trainer.algorithm.draws(batch, 0)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", list(SMALLEST))
def test_each_algorithms_forward_and_loss_is_one_graph(tmp_path, algorithm) -> None:
    trainer, batch, draws = first_step(tmp_path, algorithm)
    explained = torch._dynamo.explain(trainer.update.eager)(batch, draws)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), [r.reason for r in explained.break_reasons]


def loss_and_gradients(step, model: torch.nn.Module, batch, draws) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = step(batch, draws).loss
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.heavy  # torch.compile on a CPU: ~20 s an algorithm; `pytest -m heavy` runs it
@pytest.mark.parametrize("algorithm", list(SMALLEST))
def test_a_compiled_step_gives_the_eager_loss_and_gradients(tmp_path, algorithm) -> None:
    trainer, batch, draws = first_step(tmp_path, algorithm)
    eager_loss, eager_grads = loss_and_gradients(trainer.update.eager, trainer.model, batch, draws)
    compiled = torch.compile(trainer.update.eager, dynamic=True)
    compiled_loss, compiled_grads = loss_and_gradients(compiled, trainer.model, batch, draws)
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-4, atol=1e-5)
    assert len(compiled_grads) == len(eager_grads) > 0
    for got, want in zip(compiled_grads, eager_grads):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-5)


@pytest.mark.heavy  # 300 compiled steps on a CPU: ~2 min each, REINFORCE's ~N min
@pytest.mark.parametrize("algorithm", ["imitation", "imitation_padded", "reinforce_fresh"])
def test_a_curriculum_compiles_the_step_again_only_when_a_stage_changes_its_shapes(tmp_path, algorithm) -> None:
    """4 -> 8 -> 16 UAVs, on cached batches, on padded splits on the device and on fresh scenes (the configuration
    BENCHMARKS.md measured): the stages change the batch's sizes and the candidate budget k; at most one compile per
    stage (the first, and one when a stage's new k makes TorchDynamo treat it as dynamic), none per step."""
    cfg = compose_small(
        tmp_path,
        algorithm,
        "data.n_uav=16",
        "curriculum=aggressive",
        "curriculum.stages=[4,8,16]",
        "curriculum.replay=[0.0,0.3,0.4]",
        "curriculum.patience=2",
        "train.steps=300",
        "train.eval_every=25",
        "train.log_every=25",
        "train.ckpt_every=300",
        "optim.compile=true",
    )
    (tmp_path / "run").mkdir()
    trainer = Trainer(cfg, tmp_path / "run")
    logger = MetricLogger(tmp_path / "run", cfg.logger, config={})
    try:
        with CompileCounter() as compiled:
            trainer.fit(logger)
    finally:
        logger.finish()
    assert trainer.cur.stage == 2  # every stage trained
    assert compiled.graph_breaks == 0
    assert 1 <= compiled.compiles <= 1 + len(cfg.curriculum.stages), compiled.compiles


@pytest.mark.heavy  # torch.compile on a CPU: ~30 s an algorithm
@pytest.mark.parametrize("algorithm", list(SMALLEST))
def test_a_compiled_run_compiles_its_step_once(tmp_path, algorithm) -> None:
    """A whole run (collections, validation, the step between them) compiles the step once with no graph break;
    MAPPO read its config inside the step and recompiled at every update (28 compiles in 13 steps)."""
    anatomy = step_anatomy(
        compose_small(tmp_path, algorithm, "optim.compile=true"), tmp_path / "run", warmup=2, steps=3
    )
    assert (anatomy.compiles, anatomy.graph_breaks) == (1, 0)
