"""The policy balanced against the targets' needs (``model.capacity_iters``, Sinkhorn's scaling, and
``model.capacity_fill``): checked against hand-worked examples and a dense computation written out separately,
decided with, and kept by checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import dense_balancing, six_uav_cfg, train_in_process

from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.config.settings import split_settings
from uavgnn.data.splits import load_split
from uavgnn.evaluation.methods import compare_on_split
from uavgnn.models import TransformerGNN
from uavgnn.models.choices import Balancing, capacity_balanced, choice_log_probs
from uavgnn.models.policy import deciding_with, policy_log_probs
from uavgnn.modes.evaluate import run_eval
from uavgnn.problem.graphs import with_budget


def test_two_uavs_wanting_a_target_of_need_one_share_it() -> None:
    """UAVs 0 and 1 each take target 2 (need 1) with probability 0.9. One round: the target's 1.8 expected UAVs
    are scaled to 1 (0.5 each), each UAV renormalised: 0.5 / (0.5 + 0.1) = 5/6. The limit: 1/2 each (p = 0.5 /
    (1.5 - p) has the fixed points 1/2, stable, and 1)."""
    cand_uav, cand_target, need = torch.tensor([0, 1]), torch.tensor([2, 2]), torch.tensor([0, 0, 1])
    cand_logp, idle_logp = torch.tensor([0.9, 0.9]).log(), torch.tensor([0.1, 0.1, 0.0]).log()
    once, _ = capacity_balanced(cand_logp, idle_logp, cand_uav, cand_target, need, Balancing(1))
    torch.testing.assert_close(once.exp(), torch.full((2,), 5 / 6))
    limit, idle = capacity_balanced(cand_logp, idle_logp, cand_uav, cand_target, need, Balancing(200))
    torch.testing.assert_close(limit.exp(), torch.full((2,), 0.5), rtol=0, atol=1e-3)
    torch.testing.assert_close(idle[:2].exp(), torch.full((2,), 0.5), rtol=0, atol=1e-3)


def test_two_uavs_most_of_a_targets_need_fill_it_from_the_share_on() -> None:
    """UAVs 0 and 1 each take target 2 (need 2) with probability 0.6: 1.2 expected, 0.6 of the need. From a fill
    share of 0.5 on, one round scales the target to 2 (1.0 each), each UAV renormalised: 1 / (1 + 0.4) = 5/7; every
    round maps p to 1 / (2 - p), so 1 / (1 - p) grows by one a round: after n rounds p = 1 - 1 / (2.5 + n). From
    0.7 on (or without filling), the target is left as it is."""
    cand_uav, cand_target, need = torch.tensor([0, 1]), torch.tensor([2, 2]), torch.tensor([0, 0, 2])
    cand_logp, idle_logp = torch.tensor([0.6, 0.6]).log(), torch.tensor([0.4, 0.4, 0.0]).log()
    once, _ = capacity_balanced(cand_logp, idle_logp, cand_uav, cand_target, need, Balancing(1, fill=0.5))
    torch.testing.assert_close(once.exp(), torch.full((2,), 5 / 7))
    many, idle = capacity_balanced(cand_logp, idle_logp, cand_uav, cand_target, need, Balancing(200, fill=0.5))
    torch.testing.assert_close(many.exp(), torch.full((2,), 1 - 1 / 202.5), rtol=1e-4, atol=0)
    torch.testing.assert_close(idle[:2].exp(), torch.full((2,), 1 / 202.5), rtol=1e-3, atol=0)
    for kept in (Balancing(200, fill=0.7), Balancing(200)):
        same, _ = capacity_balanced(cand_logp, idle_logp, cand_uav, cand_target, need, kept)
        torch.testing.assert_close(same.exp(), torch.full((2,), 0.6))


@pytest.mark.parametrize("fill", [1.0, 0.3])
def test_balancing_equals_the_dense_computation(fill) -> None:
    """5 UAVs, 3 targets of needs 1, 2, 1, each UAV with some targets as candidates (one a padding candidate of
    probability 0): the sparse layer equals the dense scaling, and no target ends over its need; filling, a target
    expected short of its need (but above the fill share) ends nearer to it."""
    gen = torch.Generator().manual_seed(0)
    n_uav, need = 5, np.array([1.0, 2.0, 1.0])
    pairs = [(u, t) for u in range(n_uav) for t in range(3) if (u + t) % 4 != 3]
    cand_uav = torch.tensor([u for u, _ in pairs])
    cand_target = torch.tensor([n_uav + t for _, t in pairs])
    cand_logit = torch.randn(len(pairs), generator=gen) * 2
    cand_logit[3] = float("-inf")  # padding
    idle_logit = torch.randn(n_uav + 3, generator=gen)
    cand_logp, idle_logp = choice_log_probs(cand_logit, idle_logit, cand_uav)
    node_need = torch.tensor([0, 0, 0, 0, 0, *need.astype(int)])
    got, got_idle = capacity_balanced(cand_logp, idle_logp, cand_uav, cand_target, node_need, Balancing(25, fill))
    dense = np.zeros((n_uav, 4))  # float64 from the float32 policy
    dense[cand_uav.numpy(), cand_target.numpy() - n_uav] = cand_logp.exp().double().numpy()
    dense[:, 3] = idle_logp[:n_uav].exp().double().numpy()
    want = dense_balancing(dense, need, 25, fill)
    np.testing.assert_allclose(got.exp().numpy(), want[cand_uav.numpy(), cand_target.numpy() - n_uav], atol=1e-5)
    np.testing.assert_allclose(got_idle[:n_uav].exp().numpy(), want[:, 3], atol=1e-5)
    assert got[3] == float("-inf")
    before, after = dense[:, :3].sum(0), want[:, :3].sum(0)
    assert (after <= need + 1e-2).all() and (before > need + 0.1).any()  # it had to act
    short = (before > fill * need) & (before < need - 0.1)
    assert short.any() == (fill < 1) and (after[short] > before[short] + 0.05).all()


def test_the_deciding_policy_is_balanced_and_the_trained_one_plain(labelled_store) -> None:
    """In eval mode (validation, tests, ``mode=eval``) the policy is balanced, every UAV's choice still summing to
    1; in training mode it is the plain one, whose gradients the losses follow."""
    torch.manual_seed(0)
    model = TransformerGNN(hidden=16, heads=2, layers=2, balancing=Balancing(20))
    batch = with_budget(labelled_store.gather(torch.arange(8)), 6)
    with torch.no_grad():
        trained = policy_log_probs(model.train(), batch, 6)
        deciding = policy_log_probs(model.eval(), batch, 6)
        with deciding_with(model, Balancing()):
            plain = policy_log_probs(model, batch, 6)
    assert model.balancing == Balancing(20)
    for a, b in zip(trained, plain):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    cand_uav, cand_target = batch.cand_index[0, deciding[2]], batch.cand_index[1, deciding[2]]
    want = capacity_balanced(plain[0], plain[1], cand_uav, cand_target, batch.need, Balancing(20))
    torch.testing.assert_close(deciding[0], want[0])
    total = deciding[1].exp().index_add(0, cand_uav, deciding[0].exp())
    is_uav = batch.node_type == 0
    torch.testing.assert_close(total[is_uav], torch.ones(int(is_uav.sum())))
    expected = torch.zeros_like(total).index_add(0, cand_target, deciding[0].exp())
    assert (expected <= batch.need + 1e-2).all() and not torch.allclose(deciding[0], plain[0])


def test_a_balancing_run_ships_its_balancing_and_its_table_shows_what_it_buys(tmp_path) -> None:
    """``model.capacity_iters``, ``model.capacity_fill`` and ``model.commit_stages`` are part of the model: its
    checkpoint loads with them, the test table adds the plain policy's row and the one-stage decision's, and
    ``mode=eval`` can set others (``eval.capacity_iters``, ``eval.capacity_fill``, ``eval.commit_stages``, e.g.
    for an older checkpoint)."""
    cfg = six_uav_cfg(
        tmp_path,
        "algorithm=imitation",
        "train.steps=3",
        "model.capacity_iters=4",
        "model.capacity_fill=0.5",
        "model.commit_stages=3",
    )
    train_in_process(cfg, tmp_path / "run")
    model, graph, config = load_policy(tmp_path / "run/best.pt")
    assert model.balancing == Balancing(4, 0.5, 3) and config["model"]["capacity_fill"] == 0.5
    rows, _ = compare_on_split(model, load_split(split_settings(cfg), "test"), "greedy", graph, 6, torch.device("cpu"))
    assert [r["method"] for r in rows[:3]] == ["model (greedy)", "unbalanced (greedy)", "single-stage (greedy)"]
    # mode=eval decodes the plain policy with eval.capacity_iters=0 and eval.commit_stages=0 (its model row is the
    # table's unbalanced one), the balanced policy at once with eval.commit_stages=0 (the single-stage row)
    for name, overrides, same in (
        ("plain", ["eval.capacity_iters=0", "eval.capacity_fill=1.0"], rows[1]),
        ("at-once", [], rows[2]),
    ):
        evaluation = six_uav_cfg(
            tmp_path,
            "mode=eval",
            f"ckpt={tmp_path / 'run/best.pt'}",
            *overrides,
            "eval.commit_stages=0",
            "eval.shift_sets=[]",
            "eval.positions=[uniform]",
            "eval.keeps=[]",
            "eval.milp_budgets=[]",
            "eval.best_of=0",
        )
        (tmp_path / name).mkdir()
        decided = [r for r in run_eval(evaluation, tmp_path / name)["rows"] if r["n_uav"] == 6]
        methods = [r["method"] for r in decided]
        assert methods[0] == "model (greedy)" and "single-stage (greedy)" not in methods
        assert ("unbalanced (greedy)" in methods) == (name == "at-once")
        assert decided[0]["reward"] == pytest.approx(same["reward"], rel=1e-12)
