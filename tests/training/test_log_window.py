"""The log window (``uavgnn.training.step_stats.LogWindow``) travels in ``last.pt``: after a stop mid-window the
resumed history's rows equal an uninterrupted run's, key for key, for imitation, MASAC and COMA."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch
from conftest import compose, masac_cfg, tiny_cfg
from omegaconf import open_dict

from uavgnn.infrastructure.errors import Interrupted
from uavgnn.loggers import MetricLogger
from uavgnn.runs.history import read_history
from uavgnn.training.trainer import train
from uavgnn.training.update import Updater


def window_cfg(tmp_path: Path, algorithm: str):
    """Short runs of 12 steps with rows every 5 (no evaluation, no checkpoint before the end)."""
    if algorithm == "imitation":
        cfg = tiny_cfg(tmp_path, "train.schedule=plateau")
    elif algorithm == "masac":
        cfg = masac_cfg(tmp_path)
    else:
        cfg = compose(
            "experiment=coma",
            "logger=jsonl",
            "env.val_episodes=4",
            "hardware.batch_size=4",
            "algorithm.minibatches=2",
            "algorithm.data_passes=2",
            "train.schedule=plateau",
        )
    with open_dict(cfg):
        cfg.train.update(steps=12, ckpt_every=1000, log_every=5, eval_every=1000)
    return cfg


@pytest.mark.parametrize("algorithm", ["imitation", "masac", "coma"])
def test_the_first_history_row_after_a_resume_averages_the_whole_window(tmp_path, monkeypatch, algorithm) -> None:
    """After a resume the first row must average the whole log window, not only the new process's steps (and must
    hold the per-agent keys). A SIGTERM at step 7 (rows every 5) saves the log windows - the loop's and the
    environments' - in last.pt: the resumed history equals the uninterrupted one, key for key."""
    real, calls = Updater.algorithm_step, {"n": 0, "stop": False}

    def step(self, batch, draws, capturing=False):
        calls["n"] += 1
        if calls["n"] == 6 and calls["stop"]:
            signal.raise_signal(signal.SIGTERM)  # a real signal: seen after the step, the run stops at the next
        return real(self, batch, draws, capturing)

    monkeypatch.setattr(Updater, "algorithm_step", step)

    def run(name: str, resume: bool = False) -> list[dict]:
        cfg = window_cfg(tmp_path, algorithm)
        out = tmp_path / name
        out.mkdir(exist_ok=True)
        logger = MetricLogger(out, cfg.logger, config={}, resume_step=7 if resume else None)
        try:
            train(cfg, out, logger, resume_from=out / "last.pt" if resume else None)
        except Interrupted:
            assert not resume and torch.load(out / "last.pt", weights_only=True)["state"]["step"] == 7
        finally:
            logger.finish()
        return [{k: v for k, v in r.items() if k.startswith("train/")} for r in read_history(out) if "train/loss" in r]

    straight = run("straight")
    calls.update(n=0, stop=True)
    assert len(run("resumed")) == 1  # the row at step 5; steps 6-7 wait in the saved windows
    calls["stop"] = False
    resumed = run("resumed", resume=True)
    assert len(straight) == 3 and resumed == straight  # rows at 5, 10, 12: the same means, the same keys
