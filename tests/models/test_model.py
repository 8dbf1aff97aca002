"""The TransformerGNN policy: choice probabilities per UAV, the imitation loss, checkpointed layers, one batched
pass for every UAV of every scene, and no file left behind by building one."""

import numpy as np
import pytest
import torch

from uavgnn.data.store import GraphStore
from uavgnn.inference.decoders import decode
from uavgnn.models import TransformerGNN
from uavgnn.models.choices import choice_log_probs, imitation_loss
from uavgnn.models.policy import policy_log_probs
from uavgnn.problem.metrics import assignment_metrics


@pytest.fixture(scope="module")
def store(labelled_store) -> GraphStore:
    return labelled_store


def test_choice_probabilities_sum_to_one_per_uav(store) -> None:
    batch = store.gather(torch.arange(len(store)))
    torch.manual_seed(0)
    cand_logit, idle_logit = torch.randn(batch.cand_rank.numel()) * 3, torch.randn(batch.num_nodes)
    cand_logp, idle_logp = choice_log_probs(cand_logit, idle_logit, batch.cand_index[0])
    total = idle_logp.exp().index_add(0, batch.cand_index[0], cand_logp.exp())
    uav = batch.node_type == 0
    torch.testing.assert_close(total[uav], torch.ones(int(uav.sum())))


def test_perfect_scores_decode_to_the_milp_and_zero_loss(store) -> None:
    batch = store.gather(torch.arange(len(store)))
    keep = batch.cand_rank < 16
    cand_logp, idle_logp = choice_log_probs(
        batch.cand_label.float() * 30, (~batch.busy).float() * 30, batch.cand_index[0]
    )
    loss, acc, covered = imitation_loss(
        cand_logp, idle_logp, batch.cand_index[0], batch.cand_label, batch.busy, batch.node_type == 0
    )
    assert loss < 1e-6 and acc == 1.0 and covered == int((batch.node_type == 0).sum())
    for method in ("argmax", "greedy"):
        gaps = assignment_metrics(
            store.scenes(), decode(method, batch, cand_logp, idle_logp, keep), store.objective.numpy()
        )["optimality_gap"]
        np.testing.assert_allclose(gaps, 0.0, atol=1e-9)


def test_checkpointed_layers_give_identical_gradients(store) -> None:
    batch = store.gather(torch.arange(len(store)))
    grads = []
    for layers in ((), (0, 1, 2)):
        torch.manual_seed(0)
        model = TransformerGNN(hidden=32, heads=2, layers=3, dropout=0.1).train()
        model.checkpoint_layers = set(layers)
        torch.manual_seed(1)  # same dropout masks in both runs
        cand_logp, idle_logp, keep = policy_log_probs(model, batch, 6)
        loss, _, _ = imitation_loss(
            cand_logp, idle_logp, batch.cand_index[0, keep], batch.cand_label[keep], batch.busy, batch.node_type == 0
        )
        loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-5, atol=1e-7)


def test_one_forward_for_all_uavs_of_all_scenes(store) -> None:
    """Scores of a batch equal the scores of each scene alone: UAVs are decided in one batched pass."""
    torch.manual_seed(0)
    model = TransformerGNN(hidden=32, heads=2, layers=2).eval()
    with torch.no_grad():
        batch_logp, _, _ = policy_log_probs(model, store.gather(torch.arange(4)), 6)
        alone = torch.cat([policy_log_probs(model, store.gather(torch.tensor([i])), 6)[0] for i in range(4)])
    torch.testing.assert_close(batch_logp, alone, rtol=1e-5, atol=1e-5)


def test_building_a_model_leaves_no_file_in_the_temp_directory(tmp_path) -> None:
    """PyG writes the ``propagate`` it generates for TransformerConv to a new file in the temp directory (one per
    process); the model removes it once imported, and still runs a forward pass."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, torch; from uavgnn.models import TransformerGNN; m = TransformerGNN(); "
        "x = torch.zeros(3, 6); x[:2, 0] = 1; x[2, 1] = 1; edges = torch.tensor([[0, 2], [2, 0]]); "
        "out = m(x, torch.tensor([0, 0, 1]), edges, torch.zeros(2, 7), torch.tensor([[0], [2]]), "
        "torch.zeros(1, 7)); "
        "print(sys.modules[type(m.layers[0].attn).propagate.__module__].__file__, out[0].shape[0])"
    )
    temp = tmp_path / "temp"
    temp.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "TMPDIR": str(temp)},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    generated, scored = proc.stdout.split()
    assert Path(generated).parent == temp and scored == "1"  # PyG wrote it there, and the model ran
    assert not list(temp.glob("torch_geometric*"))
