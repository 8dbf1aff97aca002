"""The dense attention path (``optim.dense_max_nodes``) equals PyG's sparse path, and padded fresh-scene
batches (a fixed number of candidate slots per UAV) give the policy of the unpadded graphs."""

from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.data import Batch

from uavgnn.algorithms.reinforce import reinforce_loss, rollout_noise
from uavgnn.data.padded import concat_batches
from uavgnn.inference.decoders import argmax_decode, fixed_round_greedy, greedy_decode
from uavgnn.inference.refinement import policy_rounds
from uavgnn.models import TransformerGNN
from uavgnn.models.choices import choice_log_probs, policy_entropy
from uavgnn.models.policy import policy_log_probs
from uavgnn.problem.graphs import build_graph, build_graph_batch, with_budget
from uavgnn.problem.scene_batch import generate_scene_batch
from uavgnn.problem.scenes import SceneDistribution

SPARSE = SceneDistribution(range_min=0.6, range_max=1.5)  # short ranges: UAVs with no target, targets nobody reaches


def fresh_batch(sizes: tuple[int, ...] = (10, 4), count: int = 6, seed: int = 0) -> Batch:
    """A padded fresh-scene batch of scenes of several sizes (a curriculum stage and its replay)."""
    generator = torch.Generator().manual_seed(seed)
    return concat_batches(
        [build_graph_batch(generate_scene_batch(SPARSE, n, count, generator, torch.device("cpu")), 8, 4) for n in sizes]
    )


def outputs_and_gradients(model: TransformerGNN, batch: Batch, k: int, dense_max_nodes: int) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    cand_logp, idle_logp, keep = policy_log_probs(model, batch, k, dense_max_nodes=dense_max_nodes)
    finite = torch.isfinite(cand_logp)
    (torch.where(finite, cand_logp, 0.0).square().sum() + idle_logp.sum()).backward()
    return [cand_logp, idle_logp, keep] + [p.grad for p in model.parameters()]


@pytest.mark.parametrize("source", ["cached", "fresh"])
def test_dense_attention_equals_the_sparse_path_in_fp64(labelled_store, source) -> None:
    """Outputs and gradients of every parameter, fp64, to 1e-10: cached (MILP-labelled) batches and padded
    fresh ones with two scene sizes, nodes that receive no message and UAVs with no feasible target."""
    torch.manual_seed(0)
    model = TransformerGNN(hidden=16, heads=2, layers=2).double()
    batch = labelled_store.gather(torch.arange(12)) if source == "cached" else fresh_batch()
    for key in ("x", "cand_attr", "uu_attr"):
        batch[key] = batch[key].double()
    if source == "fresh":
        assert not bool(batch.cand_valid.all())
        receives = torch.zeros(batch.num_nodes, dtype=torch.bool)
        receives[batch.cand_index[1, batch.cand_valid]] = True
        assert not bool(receives[batch.node_type == 1].all())  # some target gets no message at all
    sparse = outputs_and_gradients(model, batch, 6, dense_max_nodes=0)
    dense = outputs_and_gradients(model, batch, 6, dense_max_nodes=batch.max_nodes)
    assert len(sparse) == len(dense) > 3
    for got, want in zip(dense, sparse):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


def test_a_refining_models_rounds_on_a_padded_batch_are_the_same_sparse_or_dense() -> None:
    """The sparse path sends a padded batch's padding edges to a sink node appended to the inputs: a refinement
    round's assignment input gets the sink's row too, and every round's policy equals the dense path's (fp64)."""
    torch.manual_seed(0)
    model = TransformerGNN(hidden=16, heads=2, layers=2, refine_rounds=1).double()
    torch.nn.init.normal_(model.assignment_encoder.weight)  # zero at init: the assignment must move the policy
    batch = fresh_batch()
    for key in ("x", "cand_attr", "uu_attr"):
        batch[key] = batch[key].double()
    sparse, dense = (policy_rounds(model, batch, 6, dense_max_nodes=size) for size in (0, batch.max_nodes))
    assert not torch.allclose(sparse[0][0], sparse[1][0])  # the round changed the policy
    for got, want in zip(sparse, dense):
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def test_padded_candidates_get_probability_zero_and_the_unpadded_graphs_policy() -> None:
    """On a padded fresh batch the padding slots have log-probability -inf, the real ones those of the same
    scenes' one-by-one graphs (``build_graph``, no padding), and no decoder assigns a padding slot."""
    torch.manual_seed(0)
    model = TransformerGNN(hidden=16, heads=2, layers=2).double().eval()
    generator = torch.Generator().manual_seed(3)
    scenes = generate_scene_batch(SPARSE, 10, 6, generator, torch.device("cpu"))
    padded = build_graph_batch(scenes, 8, 4)
    plain = Batch.from_data_list([build_graph(s, 8, 4) for s in scenes.to_scenes()])
    for batch in (padded, plain):
        for key in ("x", "cand_attr", "uu_attr"):
            batch[key] = batch[key].double()
    with torch.no_grad():
        cand, idle, keep = policy_log_probs(model, padded, 6, dense_max_nodes=64)
        want_cand, want_idle, want_keep = policy_log_probs(model, plain, 6)
    valid = padded.cand_valid[keep]
    assert bool((cand[~valid] == float("-inf")).all()) and bool(torch.isfinite(cand[valid]).all())
    torch.testing.assert_close(cand[valid], want_cand, rtol=0, atol=1e-6)  # choice_log_probs works in fp32
    torch.testing.assert_close(idle, want_idle, rtol=0, atol=1e-6)
    assert torch.equal(padded.cand_index[:, keep][:, valid], plain.cand_index[:, want_keep])
    uav, target = padded.cand_index[:, keep]
    want_uav, want_target = plain.cand_index[:, want_keep]
    rounds, _ = fixed_round_greedy(cand, uav, target, padded.need, padded.batch, padded.num_graphs, 48)
    decoded = [greedy_decode(cand, uav, target, padded.need), rounds, argmax_decode(cand, idle, uav, target)]
    wanted = [
        greedy_decode(want_cand, want_uav, want_target, plain.need),
        fixed_round_greedy(want_cand, want_uav, want_target, plain.need, plain.batch, plain.num_graphs, 48)[0],
        argmax_decode(want_cand, want_idle, want_uav, want_target),
    ]
    for got, want in zip(decoded, wanted):
        assert torch.equal(got, want)


def test_reinforce_on_padded_fresh_scenes_is_the_same_step_dense_or_sparse() -> None:
    """REINFORCE's loss, statistics and gradients on a padded fresh batch, with the same rollout noise, whether
    attention runs dense or sparse (fp32)."""
    torch.manual_seed(0)
    model = TransformerGNN(hidden=16, heads=2, layers=2)
    batch = with_budget(fresh_batch(), 6)
    noise = rollout_noise(torch.Generator().manual_seed(1), 3, batch.n_kept, batch.num_nodes, torch.device("cpu"))
    results = []
    for dense_max_nodes in (0, batch.max_nodes):
        model.zero_grad(set_to_none=True)
        loss, stats, _ = reinforce_loss(
            model,
            batch,
            4,
            noise,
            baseline="greedy",
            entropy_coef=0.01,
            greedy_rounds=48,
            dense_max_nodes=dense_max_nodes,
        )
        loss.backward()
        assert torch.isfinite(loss) and bool(stats["greedy_converged"])
        results.append([loss.detach(), *stats.values(), *(p.grad for p in model.parameters())])
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_the_entropy_of_a_policy_with_padding_is_exact_and_its_gradient_finite_at_any_scale() -> None:
    """Two UAVs: UAV 0 may idle (logit 0), take a candidate (1) or a padding slot (-inf); UAV 1 idles (0) or takes a
    candidate (0.5). A GradScaler-sized upstream gradient must not turn the padding into NaN."""
    logits = torch.tensor([1.0, float("-inf"), 0.5], requires_grad=True)
    cand_logp, idle_logp = choice_log_probs(logits, torch.zeros(2), torch.tensor([0, 0, 1]))
    entropy = policy_entropy(cand_logp, idle_logp, torch.tensor([0, 0, 1]), torch.tensor([True, True]))

    def binary(a: float) -> float:  # entropy of softmax([0, a])
        p = math.exp(a) / (1 + math.exp(a))
        return -(p * math.log(p) + (1 - p) * math.log(1 - p))

    assert float(entropy) == pytest.approx((binary(1.0) + binary(0.5)) / 2, rel=1e-6)
    (-65536.0 * entropy).backward()
    assert bool(torch.isfinite(logits.grad).all()) and float(logits.grad[1]) == 0.0
