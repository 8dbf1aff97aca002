"""``optim.cuda_graphs`` - each update replayed as one CUDA graph per input signature.

On a CPU: the signature that decides when a graph replays, the capturable optimisers (learning rates as device
tensors set in place, the same updates as the float ones, checkpoints interchangeable), and the run's one line
when CUDA graphs cannot run. The captured update itself needs CUDA: ``pytest -m gpu tests/training/test_cuda_graphs.py``
on a GPU machine (BENCHMARKS.md records its runs) checks that graphed training equals eager training."""

from __future__ import annotations

import logging

import pytest
import torch
from conftest import SMALLEST, compose_small

from uavgnn.algorithms.base import Network
from uavgnn.algorithms.registry import algorithms
from uavgnn.data.padded import PaddedSplit
from uavgnn.envs.replay import Transitions
from uavgnn.loggers import MetricLogger
from uavgnn.problem.graphs import with_budget
from uavgnn.training.cuda_graphs import cuda_graphs_refusal, leaves
from uavgnn.training.optimisers import Optimisers
from uavgnn.training.trainer import Trainer


def test_one_signature_per_shape_and_host_value(labelled_store) -> None:
    """Two steps of one stage and budget replay one graph (their tensors pair up in order); another budget k
    or another batch size is another graph."""
    padded = PaddedSplit.of(labelled_store, 16)
    first, second = (with_budget(padded.gather(torch.tensor(ids)), 4) for ids in ([3, 0, 7, 5], [31, 12, 8, 20]))
    noise = (torch.randn(2, 3), torch.randn(2, 3))
    (a, key_a), (b, key_b) = leaves((first, noise)), leaves((second, (torch.randn(2, 3), torch.randn(2, 3))))
    assert key_a == key_b and len(a) == len(b) > 10
    assert all(x.shape == y.shape and x.dtype == y.dtype for x, y in zip(a, b))
    assert any(x is noise[0] for x in a) and any(x is first.x for x in a)
    assert leaves((with_budget(padded.gather(torch.tensor([3, 0, 7, 5])), 5), noise))[1] != key_a
    assert leaves((with_budget(padded.gather(torch.tensor([3, 0, 7])), 4), noise))[1] != key_a
    assert hash(key_a) == hash(key_b)  # a dict key: how a replay finds its graph
    step = Transitions(*(torch.zeros(4, 3) for _ in range(9)))
    tensors, key = leaves(step)
    assert len(tensors) == 9 and key == leaves(Transitions(*(torch.ones(4, 3) for _ in range(9))))[1]


def test_capturable_optimisers_step_as_the_float_ones_and_share_checkpoints() -> None:
    """Learning rates as device tensors set in place (a graph reads them at replay): the same weights after a
    schedule of steps, the same tensors throughout, and a checkpoint of either kind loads into the other."""
    torch.manual_seed(0)
    start = [torch.randn(5, 3), torch.randn(3)]
    grads = [[torch.randn_like(p) for p in start] for _ in range(4)]
    runs = {}
    for capturable in (False, True):
        params = [torch.nn.Parameter(p.clone()) for p in start]
        opt = Optimisers([Network("net", params)], lr=0.01, weight_decay=1e-4, grad_clip=1.0, capturable=capturable)
        lr_tensor = opt.adamw[0].param_groups[0]["lr"]
        for step, grad in enumerate(grads):
            opt.set_lr(0.01, 0.5**step)
            for p, g in zip(params, grad):
                p.grad = g.clone()
            opt.step(torch.amp.GradScaler("cuda", enabled=False))
        assert (opt.adamw[0].param_groups[0]["lr"] is lr_tensor) == capturable  # in place: the graph's tensor
        runs[capturable] = (params, opt.state_dict())
    for plain, device_lr in zip(runs[False][0], runs[True][0]):
        torch.testing.assert_close(device_lr, plain, rtol=1e-6, atol=1e-7)
    assert runs[True][1]["net"]["param_groups"][0]["lr"] == pytest.approx(0.01 * 0.5**3)  # saved as a float
    for capturable, saved in ((True, runs[False][1]), (False, runs[True][1])):
        opt = Optimisers(
            [Network("net", [torch.nn.Parameter(p.clone()) for p in start])], 0.01, 1e-4, 1.0, capturable=capturable
        )
        opt.load_state_dict(saved)
        lr = opt.adamw[0].param_groups[0]["lr"]
        assert opt.loads == 1 and torch.is_tensor(lr) == capturable and float(lr) == pytest.approx(0.01 * 0.5**3)


def test_a_run_asking_for_cuda_graphs_where_they_cannot_run_says_so_and_trains(tmp_path, caplog) -> None:
    assert cuda_graphs_refusal(torch.device("cpu"), False, False, False) == "CUDA graphs need CUDA, this run is on cpu"
    assert "torchrun" in cuda_graphs_refusal(torch.device("cuda"), True, False, False)
    assert "bf16" in cuda_graphs_refusal(torch.device("cuda"), False, True, False)
    assert cuda_graphs_refusal(torch.device("cuda"), False, False, False) is None
    cfg = compose_small(tmp_path, "imitation_padded", "optim.cuda_graphs=true", "train.steps=4")
    (tmp_path / "run").mkdir()
    with caplog.at_level(logging.INFO):
        trainer = Trainer(cfg, tmp_path / "run")
    assert trainer.update.graphed is None and not trainer.update.optimisers.capturable
    assert "optim.cuda_graphs: off (CUDA graphs need CUDA, this run is on cpu)" in caplog.text
    logger = MetricLogger(tmp_path / "run", cfg.logger, config={})
    trainer.fit(logger)
    logger.finish()
    assert trainer.state.step == 4


def graphed(name: str) -> str:
    """``name`` at its smallest (``SMALLEST``) with a step that reads nothing back on the host: one that trains on
    scene splits on padded batches with the dense attention path (``optim.dense_max_nodes``), the others as
    they are."""
    padded = algorithms()[name].capabilities.scene_splits
    return next(
        key
        for key, overrides in SMALLEST.items()
        if (key == name or key.startswith(f"{name}_"))
        and (not padded or any(o.startswith("optim.dense_max_nodes=") for o in overrides))
    )


GRAPHED = [
    graphed(name)
    for name, algorithm in algorithms().items()  # the package's: SMALLEST has each
    if algorithm.__module__.startswith("uavgnn.")
] + ["mappo_swarm"]  # the graph actor and critic, the teacher's term, the disruptions


@pytest.mark.gpu  # needs CUDA: pytest -m gpu tests/training/test_cuda_graphs.py on a GPU machine
@pytest.mark.parametrize("algorithm", GRAPHED)
def test_graphed_training_equals_eager_training_on_cuda(tmp_path, algorithm) -> None:
    """12 steps with each update replayed from its CUDA graph end with the weights of 12 eager steps (CUDA's
    atomic sums reorder fp32 additions: close, not equal), and the graphs were captured, not skipped."""
    weights = {}
    for graphs in (False, True):
        cfg = compose_small(
            tmp_path / str(graphs),
            algorithm,
            "hardware.device=cuda",
            "train.steps=12",
            "train.eval_every=12",
            "train.ckpt_every=12",
            "train.log_every=4",
            f"optim.cuda_graphs={str(graphs).lower()}",
        )
        (tmp_path / str(graphs) / "run").mkdir(parents=True)
        trainer = Trainer(cfg, tmp_path / str(graphs) / "run")
        logger = MetricLogger(tmp_path / str(graphs) / "run", cfg.logger, config={})
        trainer.fit(logger)
        logger.finish()
        if graphs:
            assert (
                trainer.update.graphed is not None
                and trainer.update.graphed.failed is None
                and trainer.update.graphed.graphs
            )
        weights[graphs] = [p.detach().float().cpu() for p in trainer.model.parameters()]
    for eager, graphed in zip(weights[False], weights[True]):
        torch.testing.assert_close(graphed, eager, rtol=1e-3, atol=1e-4)
