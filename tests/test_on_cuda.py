"""What only CUDA can check besides the CUDA graphs (``tests/test_cuda_graphs.py``): runs resumed on the GPU (the
checkpoint's random states come back onto the device), and a loss whose reductions CUDA runs with other kernels
than the CPU. Left out by default; ``pytest -m gpu tests/test_on_cuda.py -n 0`` on a GPU machine."""

from __future__ import annotations

import pytest
import torch
from conftest import straight_and_resumed
from test_step_anatomy import compose_small

from uavgnn.models.choices import choice_log_probs, imitation_loss


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
