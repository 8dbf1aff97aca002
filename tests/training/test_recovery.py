"""Divergence (``uavgnn.training.recovery``): weights that blow up are never checkpointed, training rolls back to
the last good checkpoint with a lower LR; with no rollback left the run stops naming that checkpoint, which stays
good."""

from __future__ import annotations

import pytest
import torch
from conftest import logged, tiny_cfg

from uavgnn.algorithms import imitation
from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.infrastructure.errors import TrainingDiverged
from uavgnn.modes.train import run_train
from uavgnn.runs.checkpoints import load_checkpoint, weights_norm
from uavgnn.runs.history import read_history


def blow_up_weights(monkeypatch, from_call: int, once: bool) -> None:
    """From the ``from_call``-th training step on (just once, or every step), multiply every weight by 1e6
    before the loss: the blown-up update that a too-high learning rate produces."""
    real = imitation.batch_imitation_loss
    calls = {"n": 0, "fired": False}

    def loss(runner, batch, *args):
        calls["n"] += 1
        if calls["n"] >= from_call and not (once and calls["fired"]):
            calls["fired"] = True
            with torch.no_grad():
                for p in runner.parameters():
                    p.mul_(1e6)
        return real(runner, batch, *args)

    monkeypatch.setattr(imitation, "batch_imitation_loss", loss)


def test_blown_up_weights_are_never_checkpointed_and_training_rolls_back(tmp_path, monkeypatch) -> None:
    blow_up_weights(monkeypatch, from_call=13, once=True)
    out = tmp_path / "run"
    run_train(tiny_cfg(tmp_path), out)
    last = load_checkpoint(out / "last.pt")
    assert last["state"]["step"] == 30 and last["state"]["rollbacks"] == 1 and last["state"]["lr_scale"] <= 0.1
    rows = read_history(out)
    rollback = [r for r in rows if r.get("event") == "rollback"]
    assert len(rollback) == 1 and rollback[0]["step"] == 10  # back to the last good checkpoint (step 10)
    losses = logged(out)
    assert losses == sorted(set(losses)) == list(range(5, 31, 5))  # the bad segment's rows were dropped


def test_divergence_without_rollbacks_left_keeps_the_last_good_checkpoint(tmp_path, monkeypatch) -> None:
    blow_up_weights(monkeypatch, from_call=13, once=False)
    out = tmp_path / "run"
    with pytest.raises(TrainingDiverged, match=r"last good checkpoint: .*last.pt \(step 10\)"):
        run_train(tiny_cfg(tmp_path), out)
    for name in ("last.pt", "best.pt"):
        ckpt = load_checkpoint(out / name)
        assert ckpt["state"]["step"] <= 10
        assert all(torch.isfinite(w).all() and w.abs().max() < 1e3 for w in ckpt["model"].values())
    model, _, _ = load_policy(out / "best.pt")
    assert weights_norm(model) < 1e3
