"""Iterative refinement (``model.refine_rounds``), the coordinating decoder: each round reads the greedy decode of
the one before, starts as the plain model, is trained on every round, and travels with its checkpoint."""

from __future__ import annotations

import pytest
import torch
from conftest import six_uav_cfg, train_in_process

from uavgnn.algorithms.reinforce import reinforce_loss
from uavgnn.algorithms.scene_policy import batch_imitation_loss, load_initial_policy, load_policy
from uavgnn.config.settings import split_settings
from uavgnn.data.splits import load_split
from uavgnn.evaluation.methods import compare_on_split
from uavgnn.inference.decoders import greedy_decode
from uavgnn.inference.refinement import policy_rounds, refined_log_probs
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.models import TransformerGNN
from uavgnn.models.choices import imitation_loss
from uavgnn.models.policy import policy_log_probs
from uavgnn.problem.graphs import assignment_features, message_edges, with_budget
from uavgnn.runs.checkpoints import load_checkpoint


def refining(rounds: int = 1, seed: int = 0) -> TransformerGNN:
    """A small refining model whose assignment input is not zero (as after training)."""
    torch.manual_seed(seed)
    model = TransformerGNN(hidden=16, heads=2, layers=2, refine_rounds=rounds)
    torch.nn.init.normal_(model.assignment_encoder.weight, std=0.5)
    return model.eval()


def test_assignment_features_of_a_hand_worked_assignment() -> None:
    """UAVs 0-2, target 3 needs 2, target 4 needs 1; UAV 0 -> 3, UAV 1 -> 4, UAV 2 idle."""
    need = torch.tensor([0, 0, 0, 2, 1])
    features = assignment_features(need, torch.tensor([3, 4, -1, -1, -1]))
    torch.testing.assert_close(features, torch.tensor([[1.0, 0, 1], [1, 1, 1], [0, 0, 1], [0.5, 0, 1], [1, 1, 1]]))


def test_a_refining_model_starts_as_the_plain_one(labelled_store) -> None:
    """Zero-initialised, the assignment input changes nothing: every round is the plain model's policy."""
    torch.manual_seed(0)
    plain = TransformerGNN(hidden=16, heads=2, layers=2).eval()
    model = TransformerGNN(hidden=16, heads=2, layers=2, refine_rounds=2).eval()
    model.load_state_dict({**model.state_dict(), **plain.state_dict()})
    batch = labelled_store.gather(torch.arange(8))
    with torch.no_grad():
        want = policy_log_probs(plain, batch, 6)
        for got in policy_rounds(model, batch, 6):
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_each_round_reads_the_greedy_decode_of_the_one_before(labelled_store) -> None:
    model, batch = refining(rounds=2), labelled_store.gather(torch.arange(8))
    with torch.no_grad():
        rounds = policy_rounds(model, batch, 6)
        assignment = None
        for got in rounds:  # the same rounds computed step by step
            want = policy_log_probs(model, batch, 6, assignment=assignment)
            torch.testing.assert_close(got[0], want[0])
            keep = want[2]
            choice = greedy_decode(want[0], batch.cand_index[0, keep], batch.cand_index[1, keep], batch.need)
            assignment = assignment_features(batch.need, choice)
        assert not torch.equal(rounds[0][0], rounds[-1][0])  # the input is read
        torch.testing.assert_close(refined_log_probs(model, batch, 6)[0], rounds[-1][0])
        # decoded between rounds in fixed-shape rounds (the sync-free step), the same policy
        torch.testing.assert_close(refined_log_probs(model, batch, 6, greedy_rounds=48)[0], rounds[-1][0])


def test_the_layerwise_path_reads_the_assignment_as_the_plain_one(labelled_store) -> None:
    """``forward_chunked`` (huge scenes, bounded memory) with an assignment equals ``forward``."""
    model, batch = refining(), labelled_store.gather(torch.arange(8))
    edge_index, edge_attr, keep, _ = message_edges(batch, 6)
    args = (batch.x, batch.node_type, edge_index, edge_attr, batch.cand_index[:, keep], batch.cand_attr[keep])
    assignment = assignment_features(
        batch.need,
        torch.full((batch.num_nodes,), -1).index_put_((batch.cand_index[0, keep],), batch.cand_index[1, keep]),
    )
    with torch.no_grad():
        for a, b in zip(
            model.forward_chunked(*args, max_edges=200, assignment=assignment), model(*args, assignment=assignment)
        ):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_training_reaches_every_round(labelled_store) -> None:
    """Imitation sums the labels' NLL over the rounds; REINFORCE's gradient reaches the assignment input."""
    model, batch = refining().train(), with_budget(labelled_store.gather(torch.arange(8)), 6)
    loss, acc, covered = batch_imitation_loss(model, batch)
    want = sum(
        imitation_loss(c, i, batch.cand_index[0, k], batch.cand_label[k], batch.busy, batch.node_type == 0)[0]
        for c, i, k in policy_rounds(model, batch, 6)
    )
    torch.testing.assert_close(loss, want)
    sync_free, _, _ = batch_imitation_loss(model, batch, greedy_rounds=48)  # optim.sync_free: fixed-shape decodes
    torch.testing.assert_close(sync_free, want)
    loss, _, _ = reinforce_loss(model, batch, samples=4, draws=torch.Generator().manual_seed(0), entropy_coef=0.01)
    loss.backward()
    assert model.assignment_encoder.weight.grad.abs().sum() > 0


def test_a_refining_run_ships_its_rounds_and_its_table_shows_what_they_buy(tmp_path) -> None:
    """Trained with ``model.refine_rounds=1`` through both phases of the main job; its checkpoint loads as a
    refining model; the test table adds the unrefined row; a plain policy starts a refining run, not back."""
    train_in_process(
        six_uav_cfg(
            tmp_path,
            "algorithm=imitation_reinforce",
            "algorithm.imitation_steps=3",
            "train.steps=6",
            "model.refine_rounds=1",
        ),
        tmp_path / "refining",
    )
    model, graph, config = load_policy(tmp_path / "refining/best.pt")
    assert model.refine_rounds == 1 and config["model"]["refine_rounds"] == 1
    cfg = six_uav_cfg(tmp_path, "algorithm=imitation")
    rows, _ = compare_on_split(model, load_split(split_settings(cfg), "test"), "greedy", graph, 6, torch.device("cpu"))
    assert [r["method"] for r in rows[:2]] == ["model (greedy, 1 refinement round)", "unrefined (greedy)"]
    train_in_process(cfg, tmp_path / "plain")
    refining_model = TransformerGNN(
        hidden=cfg.model.hidden,
        heads=cfg.model.heads,
        layers=cfg.model.layers,
        ffn_mult=cfg.model.ffn_mult,
        refine_rounds=1,
        relaxation=cfg.model.relaxation,
    )
    refining_cfg = {**cfg.model, "refine_rounds": 1}
    load_initial_policy(refining_model, str(tmp_path / "plain/best.pt"), refining_cfg, torch.device("cpu"))
    for name, value in load_checkpoint(tmp_path / "plain/best.pt")["policy"].items():
        torch.testing.assert_close(refining_model.state_dict()[name], value, rtol=0, atol=0)
    with pytest.raises(ConfigError, match="model.refine_rounds=0 \\(checkpoint: 1\\)"):
        load_initial_policy(
            TransformerGNN(
                hidden=cfg.model.hidden, heads=cfg.model.heads, layers=cfg.model.layers, relaxation=cfg.model.relaxation
            ),
            str(tmp_path / "refining/best.pt"),
            cfg.model,
            torch.device("cpu"),
        )
