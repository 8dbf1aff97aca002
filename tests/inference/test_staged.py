"""The staged decision (``model.commit_stages``, ``decoders.staged_decode``): target by target, the surest first,
the rest re-balanced after each stage. Checked by hand, against a plain Python version built from the greedy
decoder's reference and the dense balancing, and for feasibility."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import dense_balancing
from test_decoders import reference_greedy

from uavgnn.inference.decoders import CHECK_EVERY, STAGE_ITERS, decode, greedy_decode, staged_decode
from uavgnn.infrastructure.perf import OpCounter
from uavgnn.models.choices import Balancing, capacity_balanced, choice_log_probs
from uavgnn.problem.metrics import assignment_metrics


def test_a_uav_whose_target_was_taken_by_a_surer_one_moves_on_by_hand() -> None:
    """UAVs 0, 1, 2; targets 3, 4, 5 of need 1. UAV 0 takes 3 with 0.9; UAV 1 takes 3 with 0.8 or 4 with 0.15 (idle
    0.05); UAV 2 takes 4 with 0.3 or 5 with 0.2 (idle 0.5). One greedy decode: 3 keeps UAV 0, UAV 1 falls back
    to 4 where UAV 2 is likelier (0.3 > 0.15): UAV 1 idles, target 5 is left. Two stages (threshold 1/2, no
    balancing): the first keeps target 3 (UAV 0 at 0.9), not 4 (UAV 2 at 0.3); UAV 1 renormalised without 3 takes 4
    with 0.15 / 0.2 = 0.75 > 0.3, so UAV 2 goes on to 5: every target served."""
    cand_uav, cand_target = torch.tensor([0, 1, 1, 2, 2]), torch.tensor([3, 3, 4, 4, 5])
    cand_logp = torch.tensor([0.9, 0.8, 0.15, 0.3, 0.2]).log()
    idle_logp = torch.tensor([0.1, 0.05, 0.5, 1.0, 1.0, 1.0]).log()
    need = torch.tensor([0, 0, 0, 1, 1, 1])
    once = greedy_decode(cand_logp, cand_uav, cand_target, need)
    assert once.tolist() == [3, -1, 4, -1, -1, -1]
    for single in (Balancing(0, 1.0, 0), Balancing(0, 1.0, 1)):  # 0 or 1 stage: the greedy decode itself
        assert torch.equal(staged_decode(cand_logp, idle_logp, cand_uav, cand_target, need, single), once)
    staged = staged_decode(cand_logp, idle_logp, cand_uav, cand_target, need, Balancing(0, 1.0, 2))
    assert staged.tolist() == [3, 4, 5, -1, -1, -1]


def reference_staged(prob: np.ndarray, candidate: np.ndarray, need: np.ndarray, balancing: Balancing) -> dict[int, int]:
    """The staged decision as ``decoders``' docstring states it, on a dense (nodes, nodes + idle) probability
    matrix (``candidate``: which entries are candidate edges) with ``reference_greedy`` and ``dense_balancing``:
    {uav: target}."""
    p, decided, rebalancing, last = prob.copy(), {}, min(balancing.iters, STAGE_ITERS), max(balancing.stages, 1)
    for stage in range(1, last + 1):
        edges = [(u, t) for u, t in zip(*np.nonzero(candidate & (p[:, :-1] > 0)))]
        logp = [float(np.log(p[u, t])) for u, t in edges]
        chosen = reference_greedy(logp, [u for u, _ in edges], [t for _, t in edges], need.tolist())
        if stage == last:
            return {**decided, **chosen}
        for t in set(chosen.values()):
            mine = [u for u, c in chosen.items() if c == t]
            if len(mine) == need[t] and min(p[u, t] for u in mine) >= 1 - stage / balancing.stages:
                decided.update({u: t for u in mine})
                p[:, t] = 0.0
                p[mine] = 0.0
                p[mine, -1] = 1.0
        p /= p.sum(1, keepdims=True)
        p = dense_balancing(p, np.maximum(need, 1), rebalancing, balancing.fill)
    raise AssertionError("unreachable")


@pytest.mark.parametrize("balancing", [Balancing(0, 1.0, 3), Balancing(20, 0.65, 4), Balancing(50, 1.0, 6)])
def test_the_staged_decision_equals_a_plain_python_version(labelled_store, balancing) -> None:
    """Random policies on real scene graphs (4 scenes, 6 candidates a UAV), balanced first as the model's are."""
    batch = labelled_store.gather(torch.arange(4))
    keep = batch.cand_rank < 6
    uav, target = batch.cand_index[0, keep], batch.cand_index[1, keep]
    gen = torch.Generator().manual_seed(balancing.stages)
    cand_logp, idle_logp = choice_log_probs(
        torch.randn(uav.numel(), generator=gen, dtype=torch.float64) * 2,
        torch.randn(batch.num_nodes, generator=gen, dtype=torch.float64),
        uav,
    )
    cand_logp, idle_logp = capacity_balanced(cand_logp, idle_logp, uav, target, batch.need, balancing)
    got = staged_decode(cand_logp, idle_logp, uav, target, batch.need, balancing)
    n = batch.num_nodes
    prob, candidate = np.zeros((n, n + 1)), np.zeros((n, n), dtype=bool)
    prob[uav.numpy(), target.numpy()] = cand_logp.exp().numpy()
    prob[:, -1] = idle_logp.exp().numpy()
    candidate[uav.numpy(), target.numpy()] = True
    want = reference_staged(prob, candidate, batch.need.numpy(), balancing)
    assert {u: t for u, t in enumerate(got.tolist()) if t >= 0} == want
    assert want != reference_staged(prob, candidate, batch.need.numpy(), Balancing(balancing.iters, balancing.fill))


@pytest.mark.parametrize("seed", range(3))
def test_staged_decisions_are_feasible_and_the_sampled_ones_no_worse(labelled_store, seed) -> None:
    """No target over its need or partly served, every UAV on one of its candidates; the ``sample`` decoder's
    best of 8 includes the staged decision itself."""
    batch = labelled_store.gather(torch.arange(len(labelled_store)))
    gen = torch.Generator().manual_seed(seed)
    keep = batch.cand_rank < 6
    cand_logp, idle_logp = choice_log_probs(
        torch.randn(int(keep.sum()), generator=gen) * 2,
        torch.randn(batch.num_nodes, generator=gen),
        batch.cand_index[0, keep],
    )
    scenes, balancing = labelled_store.scenes(), Balancing(10, 0.65, 5)
    staged = decode("greedy", batch, cand_logp, idle_logp, keep, balancing=balancing)
    sampled = decode("sample", batch, cand_logp, idle_logp, keep, scenes, samples=8, balancing=balancing)
    for assignments in (staged, sampled):
        assert assignment_metrics(scenes, assignments)["infeasible"].sum() == 0
        for scene, a in zip(scenes, assignments):
            count = np.bincount(a[a >= 0], minlength=scene.n_target)
            assert np.all((count == 0) | (count == scene.need))
    reward = [assignment_metrics(scenes, a)["reward"] for a in (staged, sampled)]
    assert np.all(reward[1] >= reward[0] - 1e-9)
    once = decode("greedy", batch, cand_logp, idle_logp, keep)  # the stages change some decisions
    assert any(not np.array_equal(a, b) for a, b in zip(staged, once))


@pytest.mark.parametrize("balancing", [Balancing(0, 1.0, 3), Balancing(10, 0.65, 5)])
def test_the_staged_decision_in_fixed_rounds_reads_nothing_back_and_decides_the_same(labelled_store, balancing) -> None:
    """Every greedy decode of the stages in fixed-shape rounds (all of them, or as ``decode`` runs them on CUDA,
    reading back every ``CHECK_EVERY`` rounds whether they converged). Enough rounds give the loop's decision; no
    host read inside, or only the checks (``OpCounter``); too few rounds still leave no target partial."""
    batch = labelled_store.gather(torch.arange(len(labelled_store)))
    keep = batch.cand_rank < 6
    uav, target = batch.cand_index[0, keep], batch.cand_index[1, keep]
    gen = torch.Generator().manual_seed(balancing.stages)
    cand_logp, idle_logp = choice_log_probs(
        torch.randn(uav.numel(), generator=gen) * 2, torch.randn(batch.num_nodes, generator=gen), uav
    )
    cand_logp, idle_logp = capacity_balanced(cand_logp, idle_logp, uav, target, batch.need, balancing)
    loop = staged_decode(cand_logp, idle_logp, uav, target, batch.need, balancing)
    scene = (batch.batch, batch.num_graphs)
    with OpCounter() as counted:
        fixed = staged_decode(cand_logp, idle_logp, uav, target, batch.need, balancing, 64, scene)
    assert torch.equal(fixed, loop) and counted.syncs == 0, counted.counts
    with (
        OpCounter() as checked
    ):  # what decode runs on CUDA: the rounds stop at their fixed point, read every CHECK_EVERY
        early = staged_decode(cand_logp, idle_logp, uav, target, batch.need, balancing, 64, scene, CHECK_EVERY)
    reads = checked.counts["aten::_local_scalar_dense"]
    assert torch.equal(early, loop) and 0 < reads == checked.syncs <= balancing.stages * 64 // CHECK_EVERY
    assert checked.ops < counted.ops / 2  # the launches converging takes, not all 64 rounds'
    few = staged_decode(cand_logp, idle_logp, uav, target, batch.need, balancing, 2, scene)
    count = torch.zeros(batch.num_nodes, dtype=torch.long).index_add(0, few.clamp(min=0), (few >= 0).long())
    assert not (((count > 0) & (count < batch.need)).any()) and not torch.equal(few, loop)
