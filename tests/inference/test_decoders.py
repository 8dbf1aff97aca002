"""The decoders (``uavgnn.inference.decoders``): the greedy decode against a plain Python version of its rule, its
fixed-round twin, feasibility on random scores, sampling and repair."""

import numpy as np
import pytest
import torch

from uavgnn.data.store import GraphStore
from uavgnn.inference.decoders import CHECK_EVERY, decode, fixed_round_greedy, greedy_decode, perturbed_greedy
from uavgnn.infrastructure.perf import OpCounter
from uavgnn.models.choices import choice_log_probs
from uavgnn.problem.metrics import assignment_metrics


@pytest.fixture(scope="module")
def store(labelled_store) -> GraphStore:
    return labelled_store


def reference_greedy(logp: list[float], uav: list[int], target: list[int], need: list[int]) -> dict[int, int]:
    """The greedy decoder as the module docstring states it, one UAV and one target at a time (slow, plain
    Python): {uav: target}. Ties: a UAV proposes its higher-indexed edge, a target keeps the lower-indexed."""
    alive, held, reopened = set(range(len(logp))), {}, set()
    while True:
        proposals = []
        for u in sorted(set(uav) - set(held)):
            mine = [e for e in alive if uav[e] == u]
            if mine:
                proposals.append(max(mine, key=lambda e: (logp[e], e)))
        if proposals:
            for t in {target[e] for e in proposals}:
                mine = [e for e in [*held.values(), *proposals] if target[e] == t]
                contest = sorted(mine, key=lambda e: (-logp[e], e))
                for e in contest[need[t] :]:
                    alive.discard(e)
                    held.pop(uav[e], None)
                for e in contest[: need[t]]:
                    held[uav[e]] = e
            continue
        count = {t: sum(target[e] == t for e in held.values()) for t in set(target)}
        short = {t for t, c in count.items() if 0 < c < need[t]}
        if not short:
            retry = {t for t, c in count.items() if c == 0 and t not in reopened}
            again = {e for e in range(len(logp)) if e not in alive and target[e] in retry and uav[e] not in held}
            if not again:
                return {u: target[e] for u, e in held.items()}
            alive |= again
            reopened |= retry
            continue
        alive -= {e for e in range(len(logp)) if target[e] in short}
        held = {u: e for u, e in held.items() if target[e] not in short}


@pytest.mark.parametrize("seed", range(6))
def test_greedy_decoder_matches_a_plain_python_reference(store, seed) -> None:
    """The loop decoder and its fixed-shape twin (REINFORCE's baseline) against the plain Python reference."""
    batch = store.gather(torch.arange(seed * 4, seed * 4 + 4))
    keep = batch.cand_rank < (4, 8, 16)[seed % 3]
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(int(keep.sum()), generator=gen) * (0.3, 1.0, 4.0)[seed % 3]
    if seed % 2:
        logits = logits.round()  # many ties
    cand_logp, _ = choice_log_probs(logits, torch.zeros(batch.num_nodes), batch.cand_index[0, keep])
    uav, target = batch.cand_index[0, keep], batch.cand_index[1, keep]
    choice = greedy_decode(cand_logp, uav, target, batch.need)
    expected = reference_greedy(cand_logp.tolist(), uav.tolist(), target.tolist(), batch.need.tolist())
    assert {u: t for u, t in enumerate(choice.tolist()) if t >= 0} == expected
    fixed, converged = fixed_round_greedy(cand_logp, uav, target, batch.need, batch.batch, batch.num_graphs, 48)
    assert bool(converged) and torch.equal(fixed, choice)
    early, stopped = fixed_round_greedy(cand_logp, uav, target, batch.need, batch.batch, batch.num_graphs, 48, 3)
    assert bool(stopped) and torch.equal(early, choice)  # stopped at a fixed point read back every 3 rounds


def test_the_fixed_round_greedy_says_when_it_stopped_short_and_stays_feasible(store) -> None:
    """Rounds 1..: converged exactly from the round after its fixed point on, never over-filling a target."""
    batch = store.gather(torch.arange(len(store)))
    keep = batch.cand_rank < 8
    uav, target = batch.cand_index[0, keep], batch.cand_index[1, keep]
    logits = torch.randn(int(keep.sum()), generator=torch.Generator().manual_seed(0))
    cand_logp, _ = choice_log_probs(logits, torch.zeros(batch.num_nodes), uav)
    exact = greedy_decode(cand_logp, uav, target, batch.need)
    verdicts = []
    for rounds in range(1, 40):
        choice, converged = fixed_round_greedy(
            cand_logp, uav, target, batch.need, batch.batch, batch.num_graphs, rounds
        )
        held = choice[choice >= 0]
        assert torch.all(torch.bincount(held, minlength=batch.num_nodes) <= batch.need)  # never over-filled
        verdicts.append(bool(converged))
        assert not converged or torch.equal(choice, exact)
    assert verdicts[0] is False and verdicts[-1] is True
    none, converged = fixed_round_greedy(cand_logp, uav, target, batch.need, batch.batch, batch.num_graphs, 0)
    assert not converged and bool((none == -1).all())  # no round run: nobody assigned, and not a fixed point
    assert verdicts == sorted(verdicts)  # once at its fixed point, it stays there


@pytest.mark.parametrize("seed", range(5))
def test_decoders_are_feasible_on_random_scores(store, seed) -> None:
    batch = store.gather(torch.arange(len(store)))
    gen = torch.Generator().manual_seed(seed)
    keep = batch.cand_rank < 6
    cand_logp, idle_logp = choice_log_probs(
        torch.randn(int(keep.sum()), generator=gen) * 2,
        torch.randn(batch.num_nodes, generator=gen),
        batch.cand_index[0, keep],
    )
    scenes = store.scenes()
    for method in ("argmax", "greedy", "sample"):
        assignments = decode(method, batch, cand_logp, idle_logp, keep, scenes, samples=8)
        assert assignment_metrics(scenes, assignments)["infeasible"].sum() == 0
        if method != "argmax":  # never over-assigns, never leaves a target partial
            for scene, a in zip(scenes, assignments):
                count = np.bincount(a[a >= 0], minlength=scene.n_target)
                assert np.all((count == 0) | (count == scene.need))


def test_greedy_fills_a_target_by_probability() -> None:
    # Three UAVs all prefer target 0 (need 2): the two most likely get it, the third falls back to target 1.
    cand_uav = torch.tensor([0, 0, 1, 1, 2, 2])
    cand_target = torch.tensor([3, 4, 3, 4, 3, 4])  # nodes 3, 4 are targets 0, 1
    logp = torch.log(torch.tensor([0.9, 0.1, 0.8, 0.2, 0.7, 0.3]))
    need = torch.tensor([0, 0, 0, 2, 1])
    choice = greedy_decode(logp, cand_uav, cand_target, need)
    assert choice[:3].tolist() == [3, 3, 4]


def test_greedy_closes_a_target_it_cannot_fill() -> None:
    # Target 0 needs 3 but only two UAVs reach it: they go to target 1 (need 1) and idle.
    cand_uav = torch.tensor([0, 0, 1])
    cand_target = torch.tensor([2, 3, 2])
    logp = torch.log(torch.tensor([0.9, 0.1, 0.9]))
    choice = greedy_decode(logp, cand_uav, cand_target, torch.tensor([0, 0, 3, 1]))
    assert choice[:2].tolist() == [3, -1]


def test_sample_decoder_is_the_best_of_its_samples_by_true_reward(store) -> None:
    batch = store.gather(torch.arange(len(store)))
    keep = batch.cand_rank < 8
    gen = torch.Generator().manual_seed(7)
    cand_logp, idle_logp = choice_log_probs(
        torch.randn(int(keep.sum()), generator=gen),
        torch.randn(batch.num_nodes, generator=gen),
        batch.cand_index[0, keep],
    )
    scenes = store.scenes()
    greedy = assignment_metrics(scenes, decode("greedy", batch, cand_logp, idle_logp, keep))["reward"]
    one = assignment_metrics(scenes, decode("sample", batch, cand_logp, idle_logp, keep, scenes, samples=1))["reward"]
    many = assignment_metrics(scenes, decode("sample", batch, cand_logp, idle_logp, keep, scenes, samples=32))["reward"]
    np.testing.assert_allclose(one, greedy)  # sample 0 is the greedy decode
    assert np.all(many >= greedy - 1e-9) and np.any(many > greedy + 1e-6)
    assert many.mean() <= store.objective.numpy().mean() + 1e-9  # never above the MILP optimum
    with pytest.raises(ValueError, match="decoder=sample with repair=False needs the batch's scenes"):
        decode("sample", batch, cand_logp, idle_logp, keep)
    loop = perturbed_greedy(batch, cand_logp, keep, 8, generator=torch.Generator().manual_seed(1))
    with OpCounter() as counted:  # what a GPU runs: every sample's decode in fixed rounds, read back every CHECK_EVERY
        rounds = perturbed_greedy(batch, cand_logp, keep, 8, generator=torch.Generator().manual_seed(1), rounds=64)
    assert torch.equal(rounds, loop) and 0 < counted.syncs <= 64 // CHECK_EVERY


def test_argmax_with_repair_leaves_no_partial_target(store) -> None:
    batch = store.gather(torch.arange(len(store)))
    keep = batch.cand_rank < 8
    gen = torch.Generator().manual_seed(11)
    cand_logp, idle_logp = choice_log_probs(
        torch.randn(int(keep.sum()), generator=gen) * 2,
        torch.randn(batch.num_nodes, generator=gen),
        batch.cand_index[0, keep],
    )
    scenes = store.scenes()
    raw = decode("argmax", batch, cand_logp, idle_logp, keep)
    fixed = decode("argmax", batch, cand_logp, idle_logp, keep, scenes, repair=True)
    before, after = assignment_metrics(scenes, raw), assignment_metrics(scenes, fixed)
    assert after["infeasible"].sum() == 0
    for scene, a in zip(scenes, fixed):
        count = np.bincount(a[a >= 0], minlength=scene.n_target)
        assert np.all((count == 0) | (count >= scene.need))
    assert after["reward"].mean() > before["reward"].mean()
