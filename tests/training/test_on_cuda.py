"""What only CUDA can check besides the CUDA graphs (``tests/training/test_cuda_graphs.py``): runs resumed on the
GPU (the checkpoint's random states come back onto the device), a loss whose reductions CUDA runs with other
kernels than the CPU, and decisions whose decodes run in fixed rounds there. Left out by default; ``pytest -m gpu
tests/training/test_on_cuda.py -n 0`` on a GPU machine."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import compose_small, straight_and_resumed

from uavgnn.inference.decoders import decode
from uavgnn.models.choices import Balancing, choice_log_probs, imitation_loss


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", ["imitation", "mappo_swarm"])
def test_a_run_resumed_on_cuda_goes_on_as_the_uninterrupted_one(tmp_path, algorithm) -> None:
    """8 steps straight against 4, stopped, then resumed to 8 on the GPU: the same weights (CUDA's atomic sums
    reorder fp32 additions: close, not equal)."""
    straight, resumed = straight_and_resumed(
        lambda steps: compose_small(
            tmp_path, algorithm, "hardware.device=cuda", f"train.steps={steps}", "train.schedule=plateau"
        ),
        tmp_path,
        half=4,
    )
    assert straight["state"]["step"] == resumed["state"]["step"] == 8
    for name, value in straight["model"].items():
        torch.testing.assert_close(resumed["model"][name].cpu(), value.cpu(), rtol=1e-3, atol=1e-4)


@pytest.mark.gpu
def test_the_imitation_loss_on_cuda_is_the_cpus(labelled_store) -> None:
    """Which UAVs have a label among their candidates is an 'any of' per UAV: the same UAVs covered, the same
    loss and accuracy on both devices."""
    batch = labelled_store.gather(torch.arange(len(labelled_store)))
    gen = torch.Generator().manual_seed(0)
    uav = batch.cand_index[0]
    logits = torch.randn(uav.numel(), generator=gen), torch.randn(batch.num_nodes, generator=gen)
    results = []
    for device in ("cpu", "cuda"):
        cand_logp, idle_logp = choice_log_probs(*(t.to(device) for t in logits), uav.to(device))
        inputs = (uav, batch.cand_label, batch.busy, batch.node_type == 0)
        results.append([t.cpu() for t in imitation_loss(cand_logp, idle_logp, *(t.to(device) for t in inputs))])
    (loss, acc, covered), (cuda_loss, cuda_acc, cuda_covered) = results
    assert int(cuda_covered) == int(covered) > 0
    torch.testing.assert_close(cuda_loss, loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(cuda_acc, acc)


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [1, 5])
def test_a_decision_on_cuda_is_the_cpus(labelled_store, stages) -> None:
    """``decode`` on CUDA runs its greedy decodes in fixed rounds read back every ``CHECK_EVERY`` (the CPU: the
    loop): the same assignments, with a few host reads."""
    batch = labelled_store.gather(torch.arange(len(labelled_store)))
    keep = batch.cand_rank < 8
    gen = torch.Generator().manual_seed(stages)
    cand_logp, idle_logp = choice_log_probs(
        torch.randn(int(keep.sum()), generator=gen),
        torch.randn(batch.num_nodes, generator=gen),
        batch.cand_index[0, keep],
    )
    balancing = Balancing(10, 0.65, stages)
    cpu = decode("greedy", batch, cand_logp, idle_logp, keep, balancing=balancing)
    cuda = decode("greedy", batch.to("cuda"), cand_logp.cuda(), idle_logp.cuda(), keep.cuda(), balancing=balancing)
    assert all(np.array_equal(a, b) for a, b in zip(cpu, cuda)) and len(cpu) == batch.num_graphs
