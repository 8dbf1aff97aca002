"""Every run records what produced it - command, git commit and dirty flag, versions, hardware - in
``summary.json``, at the head of ``run.log`` and on its dashboard (wandb's config: ``tests/modes/test_train.py``)."""

from __future__ import annotations

import json
import platform
import subprocess
from pathlib import Path

import torch
import torch_geometric
from conftest import ROOT, run_cli
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from uavgnn.runs.directory import _device_of
from uavgnn.runs.manifest import git_state


def git(directory: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(directory), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_git_state_of_a_clean_checkout_a_dirty_one_and_no_checkout(tmp_path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    git(repo, "add", "a.py")
    git(repo, "commit", "-q", "-m", "one")
    commit = git(repo, "rev-parse", "HEAD").strip()
    assert git_state(repo) == {"commit": commit, "dirty": False}
    (repo / "a.py").write_text("x = 2\n")
    assert git_state(repo) == {"commit": commit, "dirty": True}
    plain = tmp_path / "plain"
    plain.mkdir()
    assert git_state(plain) == {"commit": None, "dirty": None}
    inside = repo / "venv" / "site-packages"  # an installed copy inside someone's repository is not that checkout
    inside.mkdir(parents=True)
    assert git_state(inside) == {"commit": None, "dirty": None}


def test_a_device_that_cannot_be_resolved_is_named_so_in_the_manifest() -> None:
    """A sweep job whose config does not resolve still writes its ``failed.json``: the manifest says so."""
    cfg = OmegaConf.create({"hardware": {"device": "${oc.env:UAVGNN_SURELY_UNSET_VARIABLE}"}})
    assert _device_of(cfg).startswith("unresolved (")
    assert _device_of(OmegaConf.create({"hardware": {"device": "cpu"}})) == "cpu"


def test_a_run_records_its_manifest_in_the_summary_the_run_log_and_tensorboard(tmp_path) -> None:
    out = tmp_path / "run"
    run_cli(
        "experiment=debug",
        "model=tiny",
        "data.n_uav=6",
        "data.train_scenes=16",
        "data.val_scenes=4",
        "data.test_scenes=4",
        "hardware.batch_size=8",
        "train.steps=2",
        "logger=tensorboard",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={out}",
        cwd=tmp_path,
    )
    commit = git(ROOT, "rev-parse", "HEAD").strip()
    dirty = bool(git(ROOT, "status", "--porcelain").strip())
    manifest = json.loads((out / "summary.json").read_text())["manifest"]
    assert manifest["git"] == {"commit": commit, "dirty": dirty}
    assert manifest["python"] == platform.python_version() and manifest["device"] == "cpu"
    assert manifest["packages"]["torch"] == torch.__version__
    assert manifest["packages"]["torch_geometric"] == torch_geometric.__version__
    assert "logger=tensorboard" in manifest["command"] and manifest["cpu"]
    head = (out / "run.log").read_text().splitlines()[:4]  # the first lines, before the data's
    assert "command: python" in head[0] and f"code: git commit {commit}" in head[1] and "hardware: cpu," in head[3]
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    assert "run/manifest/text_summary" in events.Tags()["tensors"]
    text = events.Tensors("run/manifest/text_summary")[0].tensor_proto.string_val[0].decode()
    assert commit in text and f"torch {manifest['packages']['torch']}" in text
