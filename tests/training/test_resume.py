"""Which run to continue and whether the new config may (``uavgnn.training.resume``): a fresh run never takes over
a directory holding a run, a changed key is sorted into safe or refused, ``resume=auto`` without a checkpoint never
starts over a finished run, and a resume stopped while it rebuilds its data leaves the run untouched."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest
from conftest import run_cli, small, snapshot, start, wait_for

from uavgnn.infrastructure.errors import ConfigError, RunDirectoryError
from uavgnn.training.resume import check_resume_config, config_changes, resume_checkpoint


def test_a_fresh_run_refuses_a_directory_holding_a_run(tmp_path) -> None:
    tmp_path = tmp_path / "run"
    tmp_path.mkdir()
    (tmp_path / "metrics.jsonl").write_text('{"step": 5}\n')
    (tmp_path / "last.pt").write_bytes(b"checkpoint")
    with pytest.raises(RunDirectoryError, match="already holds a run .*continue it with resume=auto"):
        resume_checkpoint("false", tmp_path)
    assert resume_checkpoint("auto", tmp_path) == tmp_path / "last.pt"
    (tmp_path / "last.pt").unlink()
    with pytest.raises(ConfigError, match="resume=true but .* has no last.pt"):
        resume_checkpoint("true", tmp_path)
    (tmp_path / "metrics.jsonl").unlink()
    assert resume_checkpoint("auto", tmp_path) is None  # no checkpoint, nothing to overwrite: auto starts afresh


def test_resume_config_changes_are_sorted_into_safe_and_refused() -> None:
    stored = {
        "seed": 0,
        "model": {"hidden": 32, "dropout": 0.0},
        "train": {"steps": 100, "lr": 0.003},
        "logger": {"name": "wandb"},
        "hardware": {"batch_size": 8, "num_workers": 0},
    }
    new = {
        "seed": 0,
        "model": {"hidden": 32, "dropout": 0.0},
        "train": {"steps": 200, "lr": 0.003},
        "logger": {"name": "jsonl"},
        "hardware": {"batch_size": 16, "num_workers": 2},
    }
    unsafe, safe = config_changes(stored, new)
    assert unsafe == {"hardware.batch_size": (8, 16)}
    assert safe == {"train.steps": (100, 200), "logger.name": ("wandb", "jsonl"), "hardware.num_workers": (0, 2)}
    with pytest.raises(ConfigError, match=r"hardware.batch_size: 8 -> 16"):
        check_resume_config(Path("last.pt"), stored, new)
    new["hardware"]["batch_size"] = 8
    assert check_resume_config(Path("last.pt"), stored, new) == safe


def test_resume_auto_without_a_checkpoint_never_starts_over_a_finished_run(tmp_path) -> None:
    """``resume=auto`` in a run whose last.pt is gone used to start afresh, wiping metrics.jsonl and summary.json."""
    tmp_path = tmp_path / "run"
    tmp_path.mkdir()
    (tmp_path / "metrics.jsonl").write_text('{"step": 5, "train/loss": 1.0}\n')
    (tmp_path / "summary.json").write_text("{}")
    for resume in ("auto", "false"):
        with pytest.raises(RunDirectoryError, match="holds a run without a last.pt to continue .*another directory"):
            resume_checkpoint(resume, tmp_path)
    (tmp_path / "summary.json").unlink()
    (tmp_path / "metrics.jsonl").write_text("")  # an empty history (killed before any row): nothing to lose
    assert resume_checkpoint("auto", tmp_path) is None


@pytest.mark.heavy  # the suite's time: pytest -m heavy tests/training/test_resume.py
def test_sigterm_while_a_resume_rebuilds_its_data_leaves_the_run_untouched(tmp_path) -> None:
    """A resumed run whose cache is gone rebuilds it (minutes at scale) before it writes anything: a SIGTERM
    then leaves history and checkpoints exactly as they were (they used to be opened and truncated first)."""
    run = tmp_path / "run"
    args = small(tmp_path, run, "data.train_scenes=1200", "train.ckpt_every=2")
    run_cli(*args, "train.steps=2", cwd=tmp_path)
    shutil.rmtree(tmp_path / "cache")
    before = snapshot(run)
    proc = start(*args, "train.steps=4", "resume=auto", cwd=tmp_path)
    wait_for(lambda: "MILP labels" in (tmp_path / "bg.err").read_text() or proc.poll() is not None, "the rebuild")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    err = (tmp_path / "bg.err").read_text()
    assert proc.returncode == 143 and "interrupted by SIGTERM" in err, err[-3000:] + (tmp_path / "bg.out").read_text()
    assert snapshot(run) == before
