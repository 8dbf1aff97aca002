"""The wandb dashboard (``uavgnn.loggers.wandb_dashboard``): an online start that gets no answer falls back to an
offline run after ``logger.init_timeout``, in one line, with the command that uploads it."""

from __future__ import annotations

import glob
import re
import socket
from pathlib import Path

import pytest
import wandb
from conftest import compose

from uavgnn.loggers import MetricLogger
from uavgnn.runs.history import read_history


@pytest.mark.slow
@pytest.mark.filterwarnings("error::RuntimeWarning")  # a dashboard switched off would only warn: fail on it
def test_wandb_online_without_an_answer_falls_back_to_offline_in_bounded_time(tmp_path, monkeypatch, capsys) -> None:
    """wandb.init with a key and no network can stall ~90 s. A server that accepts connections and never answers
    costs one online start given ``logger.init_timeout`` (which ends it), then the run logs offline and says so
    in one line."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    settings = compose("logger=wandb", "logger.mode=online", "logger.init_timeout=3").logger
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(tmp_path)
    starts = []  # (mode, the init_timeout wandb was given, its error or None) of each wandb.init
    real_init = wandb.init

    def init(*args, **kwargs):
        try:
            run = real_init(*args, **kwargs)
        except Exception as err:
            starts.append((kwargs["mode"], kwargs["settings"].init_timeout, str(err)))
            raise
        starts.append((kwargs["mode"], kwargs["settings"].init_timeout, None))
        return run

    monkeypatch.setattr(wandb, "init", init)
    logger = MetricLogger(Path("run"), settings, config={"seed": 0})  # relative, as Hydra's run.dir usually is
    try:
        logger.log({"train/loss": 1.0}, step=1)
    finally:
        logger.finish()
        silent.close()
    # one online start, given logger.init_timeout and ended by it, then the offline run: no wait beyond the setting
    assert [(mode, timeout) for mode, timeout, _ in starts] == [("online", 3), ("offline", 3)]
    assert starts[1][2] is None and re.search("deadline exceeded|timed out", starts[0][2] or ""), starts
    printed = capsys.readouterr()
    err = printed.err.splitlines()
    notice = [line for line in err if "logging offline instead" in line]
    assert len(notice) == 1 and "online start failed within 3 s" in notice[0]
    offline = list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("*.wandb")) and read_history(tmp_path / "run")
    hint = next(line for line in printed.out.splitlines() if "upload: wandb sync " in line).split("wandb sync ")[1]
    assert Path(hint).is_absolute() and glob.glob(hint) == [str(offline[0])]  # works from any directory
