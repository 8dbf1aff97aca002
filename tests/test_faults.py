"""Fault drills (issue 13): hostile checkpoints, signals, divergence, damaged caches, read-only and full disks,
concurrent runs, changed configs on resume. Each drill runs the real program (``run.py`` in a subprocess, or
the training loop in-process where a fault has to be injected) and checks what a user would see: one line
naming the problem, a non-zero exit, and nothing already computed lost. RELIABILITY.md lists them."""

from __future__ import annotations

import copy
import dataclasses
import functools
import glob
import hashlib
import json
import math
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import typing
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import ROOT, run_cli
from hydra import compose, initialize_config_dir
from omegaconf import ListConfig, OmegaConf, open_dict

from uavgnn.algorithms import imitation
from uavgnn.algorithms.registry import algorithms, check_config, model_schemas
from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.config import register_configs
from uavgnn.config.schemas import Config
from uavgnn.config.settings import transformer
from uavgnn.config.validation import RANGES
from uavgnn.data.cache import (
    BuildSettings,
    SplitSpec,
    cache_entries,
    clear_cache,
    foreign_entries,
    load_or_build,
    verify,
)
from uavgnn.envs.replay import ReplayBuffer
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.evaluation.methods import Controls, compare_on_split
from uavgnn.infrastructure.errors import (
    CheckpointError,
    ConfigError,
    Interrupted,
    MemoryBudgetError,
    RunDirectoryError,
    SceneFileError,
    StorageError,
    TrainingDiverged,
)
from uavgnn.infrastructure.storage import atomic_write, system_path_problem
from uavgnn.loggers import MetricLogger
from uavgnn.models import model_from_config
from uavgnn.modes.cache import clear
from uavgnn.modes.train import run_train
from uavgnn.problem.graphs import GraphSettings
from uavgnn.problem.scene_io import load_scene
from uavgnn.problem.scenes import Scene, SceneDistribution, feasible_pairs
from uavgnn.runs.checkpoints import load_checkpoint, part_checksums, weights_norm
from uavgnn.runs.history import read_history
from uavgnn.training.resume import check_resume_config, config_changes, resume_checkpoint
from uavgnn.training.trainer import train
from uavgnn.training.update import Updater

SMALL = [
    "experiment=debug",
    "model=tiny",
    "data.n_uav=6",
    "data.train_scenes=64",
    "data.val_scenes=8",
    "data.test_scenes=8",
    "hardware.batch_size=8",
    "train.log_every=5",
    "train.warmup_steps=2",
    "logger=jsonl",
]
register_configs()


def small(tmp_path: Path, run: Path | str, *extra: str) -> list[str]:
    return [*SMALL, f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={run}", *extra]


def start(*overrides: str, cwd: Path) -> subprocess.Popen:
    """``run.py`` in the background, its output in files (a pipe nobody reads could block it)."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / "run.py"), *overrides],
        cwd=cwd,
        stdout=(cwd / "bg.out").open("w"),
        stderr=(cwd / "bg.err").open("w"),
    )


def wait_for(condition, what: str, timeout: float = 240.0) -> None:
    deadline = time.time() + timeout
    while not condition():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def logged(run_dir: Path, key: str = "train/loss") -> list[int]:
    return [r["step"] for r in read_history(run_dir) if key in r]


def one_error_line(proc: subprocess.CompletedProcess, text: str) -> str:
    """The error is printed once, on one line, with no traceback; returns that line."""
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, output[-3000:]
    lines = [line for line in output.splitlines() if text in line]
    assert len(lines) == 1, output[-3000:]
    return lines[0]


# ---------------------------------------------------------------- checkpoints that would run code


class Payload:
    """Unpickling this creates ``marker``: the side effect a hostile checkpoint would have."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture
def hostile(tmp_path) -> tuple[Path, Path]:
    marker = tmp_path / "PWNED"
    path = tmp_path / "hostile.pt"
    torch.save({"policy": {"w": Payload(marker)}, "config": "model: {}", "state": {"step": 1}}, path)
    return path, marker


@pytest.mark.slow
@pytest.mark.parametrize(
    "path_kind", ["eval", "resume", *(pytest.param(kind, marks=pytest.mark.heavy) for kind in ("solve", "init_from"))]
)
def test_a_checkpoint_that_would_run_code_is_refused_on_every_path(tmp_path, hostile, path_kind) -> None:
    ckpt, marker = hostile
    run = tmp_path / "run"
    args = {
        "eval": ["mode=eval", f"ckpt={ckpt}"],
        "solve": ["mode=solve", "solver=model", f"ckpt={ckpt}"],
        "init_from": ["algorithm=reinforce", f"algorithm.init_from={ckpt}"],
        "resume": ["resume=true"],
    }[path_kind]
    if path_kind == "resume":
        run.mkdir()
        shutil.copy(ckpt, run / "last.pt")
        ckpt = run / "last.pt"
    proc = run_cli(*small(tmp_path, run, *args), cwd=tmp_path, check=False)
    assert proc.returncode == 2
    line = one_error_line(proc, "refused")
    assert str(ckpt) in line and "would run code" in line
    assert not marker.exists()  # the payload never ran
    if path_kind == "resume":  # a refused resume leaves the run directory as it was: no log, no .hydra written
        assert sorted(p.name for p in run.iterdir()) == ["last.pt"]
    else:  # refused before it wrote anything of its own: no run directory left (issue 62)
        assert not run.exists()


def test_truncated_text_and_foreign_checkpoints_are_one_line_errors(tmp_path, hostile) -> None:
    ckpt, marker = hostile
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(ckpt.read_bytes()[:200])
    text = tmp_path / "notes.pt"
    text.write_text("not a checkpoint\n")
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, foreign)
    for path, reason in (
        (ckpt, "would run code"),
        (truncated, "unreadable, truncated"),
        (text, "unreadable, truncated"),
        (foreign, "not a uavgnn checkpoint"),
        (tmp_path / "missing.pt", "no such file"),
    ):
        with pytest.raises(CheckpointError) as err:
            load_policy(path)
        assert str(path) in str(err.value) and reason in str(err.value) and "\n" not in str(err.value)
    assert not marker.exists()


@pytest.mark.slow
def test_text_file_as_ckpt_on_the_command_line(tmp_path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    proc = run_cli(
        *small(tmp_path, tmp_path / "run", "mode=solve", "solver=model", f"ckpt={text}"), cwd=tmp_path, check=False
    )
    assert proc.returncode == 2 and str(text) in one_error_line(proc, "unreadable, truncated or not a checkpoint")


# ---------------------------------------------------------------- signals


def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state) from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            table[int(entry.name)] = (int(fields[1]), fields[0])
    return table


def living(pids: list[int]) -> list[int]:
    table = process_table()
    return [pid for pid in pids if pid in table and table[pid][1] != "Z"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig", [signal.SIGKILL, *(pytest.param(s, marks=pytest.mark.heavy) for s in (signal.SIGTERM, signal.SIGINT))]
)
def test_label_workers_die_with_the_main_process(tmp_path, sig) -> None:
    proc = start(
        *small(tmp_path, tmp_path / "run", "data.n_uav=16", "data.train_scenes=6000", "data.label_workers=2"),
        cwd=tmp_path,
    )
    workers: list[int] = []

    def labelling() -> bool:
        workers[:] = [pid for pid, (parent, _) in process_table().items() if parent == proc.pid]
        return len(workers) >= 2 or proc.poll() is not None

    wait_for(labelling, "the MILP label workers")
    assert proc.poll() is None, "labelling finished before the drill"
    time.sleep(0.5)
    proc.send_signal(sig)
    proc.wait(timeout=30)
    wait_for(lambda: not living(workers), f"label workers {workers} to exit after {sig.name}", timeout=15)
    if sig == signal.SIGINT:  # Ctrl-C is the user's: a clean line and the shell's status for it
        err = (tmp_path / "bg.err").read_text()
        assert proc.returncode == 130 and "interrupted (Ctrl-C)" in err and "Traceback" not in err, err[-2000:]


@pytest.mark.slow
def test_sigterm_stops_at_a_step_and_the_run_resumes_exactly(tmp_path) -> None:
    """SIGTERM mid-training -> last.pt at that step, one line saying how to resume, exit 143; meanwhile a second
    process is refused the directory; afterwards a torn history line and a stale temp file are cleaned up, and the
    resumed run equals an uninterrupted one. (A fresh run into the directory, or a resume with a changed seed, is
    refused leaving it byte-identical: test_refused_runs_leave_the_run_directory_byte_identical.)"""
    run = tmp_path / "run"
    # a flat LR (independent of train.steps) and one thread (bit-exact float sums, see test_curriculum)
    base = ["train.schedule=plateau", "train.eval_every=100000", "train.ckpt_every=100000", "hardware.threads=1"]
    proc = start(*small(tmp_path, run, *base, "train.steps=100000"), cwd=tmp_path)
    wait_for(lambda: (run / "metrics.jsonl").exists() and logged(run), "training to start")
    second = run_cli(*small(tmp_path, run, *base, "train.steps=100000", "resume=auto"), cwd=tmp_path, check=False)
    assert second.returncode == 2 and f"is in use by pid {proc.pid}" in one_error_line(second, "error:")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    err = (tmp_path / "bg.err").read_text()
    assert proc.returncode == 143 and "Traceback" not in err, err[-3000:]
    notice = [line for line in err.splitlines() if "interrupted by SIGTERM" in line]
    assert len(notice) == 1 and "resume with: python run.py" in notice[0] and f"hydra.run.dir={run}" in notice[0]
    stopped = torch.load(run / "last.pt", weights_only=True)["state"]["step"]
    assert 0 < stopped < 100000 and f"at step {stopped}:" in notice[0]

    with (run / "metrics.jsonl").open("a") as f:  # killed in the middle of writing a line
        f.write('{"step": 99999, "train/lo')
    (run / ".last.pt.x1y2.tmp").write_bytes(b"half a checkpoint")
    steps = [f"train.steps={stopped + 10}"]
    run_cli(*small(tmp_path, run, *base, *steps, "resume=auto", "train.log_every=2"), cwd=tmp_path)
    run_cli(*small(tmp_path, tmp_path / "straight", *base, *steps), cwd=tmp_path)
    resumed, straight = (torch.load(d / "last.pt", weights_only=True) for d in (run, tmp_path / "straight"))
    for name, value in straight["model"].items():
        torch.testing.assert_close(resumed["model"][name], value, rtol=0, atol=0)
    rows = read_history(run)
    assert not list(run.glob(".*.tmp")) and all(r["step"] <= stopped + 10 for r in rows)
    losses = logged(run)
    assert losses == sorted(set(losses)) and losses[-1] == stopped + 10  # no repeated, no torn rows
    event = next(r for r in rows if r.get("event") == "resume")
    assert event["step"] == stopped and event["changed"]["train.log_every"] == [5, 2]
    assert "train.log_every" in (run / "run.log").read_text()  # the applied change is warned about
    log = (run / "run.log").read_text()
    assert f"step {stopped + 10}: val" in log and "Test set:" in log and f"results in {run}" in log


@pytest.mark.slow
def test_sigint_stops_with_a_checkpoint_and_exit_130(tmp_path) -> None:
    run = tmp_path / "run"
    proc = start(*small(tmp_path, run, "train.steps=100000", "train.ckpt_every=100000"), cwd=tmp_path)
    wait_for(lambda: (run / "metrics.jsonl").exists() and logged(run), "training to start")
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    err = (tmp_path / "bg.err").read_text()
    assert proc.returncode == 130 and "Traceback" not in err and "interrupted by SIGINT" in err
    assert torch.load(run / "last.pt", weights_only=True)["state"]["step"] > 0


# ---------------------------------------------------------------- divergence


def compose_cfg(*overrides: str):
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        return compose("config", overrides=list(overrides))


def tiny_cfg(tmp_path: Path, *overrides: str):
    cfg = compose_cfg("experiment=debug", "model=tiny", "logger=jsonl", *overrides)
    with open_dict(cfg):
        cfg.data.update(
            n_uav=6, train_scenes=32, val_scenes=8, test_scenes=8, cache_dir=str(tmp_path / "cache"), label_workers=1
        )
        cfg.train.update(steps=30, eval_every=10, ckpt_every=5, log_every=5, warmup_steps=1)
        cfg.hardware.batch_size = 8
    return cfg


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


# ---------------------------------------------------------------- caches

SPEC, SETTINGS = SplitSpec("train", 6, 12, 7), BuildSettings(k_max=8, uav_neighbours=3, label_time_limit=5.0)


@pytest.mark.parametrize(
    "manifest, reason",
    [
        ([], "manifest of the wrong shape"),
        ({"files": []}, "manifest of the wrong shape"),
        ({"files": {"graphs.pt": {"sha256": "00"}}}, "lacks the size and checksum"),
        ({"files": {"graphs.pt": {"bytes": "12", "sha256": "00"}}}, "lacks the size and checksum"),
        ("not json", "unreadable manifest"),
    ],
)
def test_a_manifest_of_the_wrong_shape_means_damaged_and_rebuild(tmp_path, manifest, reason) -> None:
    cache = tmp_path / "cache"
    first = load_or_build(SPEC, SceneDistribution(), SETTINGS, cache, workers=1)
    (directory,) = [p for p in cache.iterdir() if p.is_dir()]
    (directory / "manifest.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    assert reason in verify(directory) and reason in cache_entries(cache)[0]["problem"]
    with pytest.warns(RuntimeWarning, match=reason):
        again = load_or_build(SPEC, SceneDistribution(), SETTINGS, cache, workers=1)
    assert torch.equal(again.objective, first.objective) and verify(directory) is None


@pytest.mark.slow
def test_cache_verify_gives_a_reason_per_damaged_entry(tmp_path) -> None:
    load_or_build(SPEC, SceneDistribution(), SETTINGS, tmp_path / "cache", workers=1)
    (directory,) = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    (directory / "manifest.json").write_text("[]")
    proc = run_cli(
        "mode=cache",
        "action=verify",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 1 and "DAMAGED: manifest of the wrong shape" in proc.stdout
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------- read-only and full disks (real mounts)


def namespace(script: str) -> subprocess.CompletedProcess[str]:
    """Run a shell script in a private user + mount namespace (no root needed where the kernel allows
    unprivileged user namespaces): its tmpfs and read-only mounts vanish with it."""
    proc = subprocess.run(
        ["unshare", "--map-root-user", "--mount", "sh", "-c", script], capture_output=True, text=True, timeout=600
    )
    assert not proc.stderr.startswith("unshare:"), f"private mounts are not possible here: {proc.stderr.strip()}"
    return proc


def cli(*overrides: str) -> str:
    return " ".join([sys.executable, str(ROOT / "run.py"), *overrides])


def read_only(directory: Path) -> str:
    return f"mount --bind {directory} {directory} && mount -o remount,ro,bind {directory} {directory}"


@pytest.mark.slow
@pytest.mark.heavy  # two training runs (15 s); the read-only run/cache error drill below runs by default
def test_an_intact_cache_on_read_only_media_is_used(tmp_path) -> None:
    run_cli(*small(tmp_path, tmp_path / "first", "train.steps=4"), cwd=tmp_path)  # builds the cache
    second = cli(*small(tmp_path, tmp_path / "second", "train.steps=4"))
    proc = namespace(f"{read_only(tmp_path / 'cache')} && cd {tmp_path} && {second}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("cache hit") + proc.stderr.count("cache hit") >= 3  # train, val and test


@pytest.mark.slow
def test_read_only_run_or_cache_directory_is_one_line_naming_it(tmp_path) -> None:
    ro = tmp_path / "ro"
    (ro / "run").mkdir(parents=True)
    (ro / "cache").mkdir()
    run_on_ro = cli(*small(tmp_path, ro / "run"))
    cache_on_ro = cli(*SMALL, f"data.cache_dir={ro / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}")
    proc = namespace(f"{read_only(ro)} && cd {tmp_path} && {run_on_ro}; echo EXIT=$?; {cache_on_ro}; echo EXIT=$?")
    assert proc.stdout.count("EXIT=2") == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"cannot write {ro / 'run'}: Read-only file system" in proc.stderr
    assert f"cannot write {ro / 'cache'}/train-n6-" in proc.stderr and "Read-only file system" in proc.stderr


@pytest.mark.slow
@pytest.mark.heavy  # 15 s (CI margin); storage errors by default: the read-only run/cache drill
def test_disk_full_while_writing_a_checkpoint_or_the_cache(tmp_path) -> None:
    full = tmp_path / "full"
    tiny = tmp_path / "tiny"
    full.mkdir()
    tiny.mkdir()
    run_on_full = cli(*small(tmp_path, full / "run", "train.ckpt_every=5"))  # its cache on the roomy disk
    cache_on_full = cli(*SMALL, f"data.cache_dir={tiny}", f"hydra.run.dir={tmp_path / 'run'}")
    proc = namespace(
        f"mount -t tmpfs -o size=160k tmpfs {full} && mount -t tmpfs -o size=16k tmpfs {tiny} && "
        f"cd {tmp_path} && {run_on_full}; echo EXIT=$?; echo LS; ls -A {full / 'run'}; echo END; "
        f"{cache_on_full}; echo EXIT=$?; echo LS; ls -A {tiny}; echo END"
    )
    assert proc.stdout.count("EXIT=2") == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"cannot write {full / 'run' / 'last.pt'}: No space left on device" in proc.stderr
    assert f"cannot write {tiny}/train-n6-" in proc.stderr
    listed_run, listed_cache = [block.split("END")[0].split() for block in proc.stdout.split("\nLS\n")[1:]]
    assert "metrics.jsonl" in listed_run  # the history written so far is kept ...
    assert not [name for name in listed_run if name.endswith(".tmp") or name == "last.pt"]  # ... no partial file
    assert not [name for name in listed_cache if not name.endswith(".lock")]  # no half-built cache


# ---------------------------------------------------------------- run directories and resumption (units)


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


def test_a_torn_last_history_line_is_dropped_but_a_torn_middle_is_an_error(tmp_path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "a": 1}\n{"step": 2, "a"')
    assert read_history(tmp_path) == [{"step": 1, "a": 1}]
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "a"\n{"step": 2}\n')
    with pytest.raises(RunDirectoryError, match="damaged: line 1 is not a JSON object"):
        read_history(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n5\n')  # valid JSON, but not a row
    with pytest.raises(RunDirectoryError, match="damaged: line 2 is not a JSON object"):
        read_history(tmp_path)


# ---------------------------------------------------------------- bad config values (table-driven)

HANDLED_ELSEWHERE = {"optim.checkpoint_layers", "curriculum.stages", "curriculum.replay"}  # own rules, own tests


def numeric_keys(schema: type = Config, prefix: str = "") -> dict[str, type]:
    """Every int/float key of the schema (list keys by their element type)."""
    found: dict[str, type] = {}
    for f in dataclasses.fields(schema):
        kind = typing.get_type_hints(schema)[f.name]
        inner = [a for a in typing.get_args(kind) if a is not type(None)]
        kind = inner[0] if typing.get_origin(kind) in (typing.Union, list) and len(inner) == 1 else kind
        if dataclasses.is_dataclass(kind):
            found.update(numeric_keys(kind, f"{prefix}{f.name}."))
        elif kind in (int, float):
            found[f"{prefix}{f.name}"] = kind
    return found


def every_numeric_key() -> dict[str, tuple[str, type, object]]:
    """Every numeric key of every schema -> (the algorithm that composes it, its type, its range): the shared
    groups' and the model kinds' (``RANGES``), each algorithm's own (declared in its schema)."""
    keys = {key: ("imitation", kind, RANGES.get(key)) for key, kind in numeric_keys().items()}
    for schema in model_schemas().values():
        keys.update({key: ("imitation", kind, RANGES.get(key)) for key, kind in numeric_keys(schema, "model.").items()})
    for name, algorithm in algorithms().items():
        ranges = {f"algorithm.{f.name}": f.metadata.get("range") for f in dataclasses.fields(algorithm.config)}
        keys.update(
            {key: (name, kind, ranges[key]) for key, kind in numeric_keys(algorithm.config, "algorithm.").items()}
        )
    return keys


def out_of_range(valid, kind: type) -> list:
    bad = []
    if math.isfinite(valid.low):
        bad.append(valid.low if valid.low_open else valid.low - 1)
    if math.isfinite(valid.high):
        bad.append(valid.high if valid.high_open else valid.high + 1)
    if kind is float:
        bad += [math.nan, math.inf, -math.inf]
    return [kind(v) if math.isfinite(v) else v for v in bad]


def test_every_numeric_key_has_a_valid_range() -> None:
    missing = [
        key for key, (_, _, valid) in every_numeric_key().items() if valid is None and key not in HANDLED_ELSEWHERE
    ]
    assert not missing and set(RANGES) <= set(every_numeric_key())


@functools.cache
def valid_config(algorithm: str):
    """The default config of ``algorithm``, composed and checked once per worker (composing takes 0.4 s; each
    key's test changes a deep copy)."""
    cfg = compose_cfg(f"algorithm={algorithm}")
    check_config(cfg)
    return cfg


@pytest.mark.parametrize("key", sorted(set(every_numeric_key()) - HANDLED_ELSEWHERE))
def test_values_outside_each_range_are_rejected_naming_the_key(key) -> None:
    algorithm, kind, valid = every_numeric_key()[key]
    base = valid_config(algorithm)
    is_list = isinstance(OmegaConf.select(base, key), ListConfig)
    for value in out_of_range(valid, kind):
        cfg = copy.deepcopy(base)
        OmegaConf.update(cfg, key, [value] if is_list else value)
        with pytest.raises(ConfigError) as err:
            check_config(cfg)
        assert str(err.value).startswith(f"{key}=") and str(valid) in str(err.value)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["task=file"], "task=file needs task.file=PATH"),
        (["train.lr=nan"], "train.lr=nan must be > 0"),
        (["train.grad_clip=-1"], "train.grad_clip=-1.0 must be > 0"),
        (["model.dropout=1.0"], "model.dropout=1.0 must be in [0, 1)"),
        (
            ["algorithm=imitation", "data.source=generated"],
            "data.source=generated with algorithm=imitation: fresh scenes have no MILP labels",
        ),
        (
            ["data.source=generated", "algorithm=reinforce", "algorithm.imitation_weight=0.5"],
            "data.source=generated with algorithm.imitation_weight=0.5",
        ),
        (
            ["data.source=generated", "algorithm=reinforce", "task=file", "task.file=x.json"],
            "data.source=generated with task=file",
        ),
        (["data.source=files"], "data.source='files' is not one of cache, generated"),
    ],
)
def test_named_bad_values_fail_before_any_work(overrides, message) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_config(compose_cfg(*overrides))


# ---------------------------------------------------------------- malformed scene files (generated fuzz)


def valid_scene() -> dict:
    return {
        "uav_position": [[0, 0], [3, 0], [0, 4]],
        "uav_range": [5.0, 5.0, 5.0],
        "target_position": [[3, 4], [1, 1]],
        "target_need": [2, 1],
        "target_value": [5.0, 1.0],
        "lam": 0.1,
    }


FIELD_MUTATIONS = {  # each makes any field invalid, whatever its shape
    "deleted": None,
    "text": "abc",
    "boolean": True,
    "nested too deep": [[[1.0]]],
    "empty object": {},
    "nan": float("nan"),
    "negative infinity": float("-inf"),
    "beyond int64": 2**63,
    "overflowing": 1e308,
    "ragged": [[1, 2], [3]],
    "beyond every integer type": 10**400,
}


def malformed_files(directory: Path) -> list[tuple[Path, str]]:
    """(file, text its error must contain): every field x every mutation, plus damaged bytes of every kind."""
    files = []
    for field in valid_scene():
        for name, value in FIELD_MUTATIONS.items():
            raw = valid_scene()
            if name == "deleted":
                del raw[field]
            else:
                raw[field] = value
            path = directory / f"{field}-{name.replace(' ', '_')}.json"
            path.write_text(
                json.dumps(raw)
                if name != "beyond every integer type"
                else json.dumps(raw).replace('"__BIG__"', str(value))
            )
            if name == "beyond every integer type":
                path.write_text(json.dumps({**raw, field: "__BIG__"}).replace('"__BIG__"', str(value)))
            files.append((path, f"'{field}'"))
    text = json.dumps(valid_scene())
    for cut in (1, 7, len(text) // 3, len(text) // 2, len(text) - 1):
        (directory / f"cut{cut}.json").write_text(text[:cut])
        files.append((directory / f"cut{cut}.json", "not valid JSON"))
    rng = np.random.default_rng(0)
    for i in range(4):
        (directory / f"noise{i}.json").write_bytes(rng.integers(0, 256, 200, dtype=np.uint8).tobytes())
        files.append((directory / f"noise{i}.json", "not valid JSON"))
        (directory / f"noise{i}.npz").write_bytes(rng.integers(0, 256, 200, dtype=np.uint8).tobytes())
        files.append((directory / f"noise{i}.npz", "not a readable NPZ archive"))
    (directory / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    files.append((directory / "deep.json", "nested too deeply"))
    good = directory / "good.npz"
    np.savez(good, **{k: np.asarray(v) for k, v in valid_scene().items()})
    for cut in (10, 100, good.stat().st_size // 2, good.stat().st_size - 10):
        (directory / f"cut{cut}.npz").write_bytes(good.read_bytes()[:cut])
        files.append((directory / f"cut{cut}.npz", "NPZ archive"))
    np.save(directory / "array.npy", np.zeros((3, 2)))
    (directory / "array.npy").rename(directory / "array.npz")
    files.append((directory / "array.npz", "not an NPZ archive"))
    (directory / "folder.json").mkdir()
    files.append((directory / "folder.json", "not a regular file"))
    (directory / "empty.json").write_text("")
    (directory / "empty.npz").write_bytes(b"")
    files += [(directory / "empty.json", "not valid JSON"), (directory / "empty.npz", "not a readable NPZ")]
    np.savez(
        directory / "objects.npz",
        **{**{k: np.asarray(v) for k, v in valid_scene().items()}, "lam": np.array([{"a": 1}], dtype=object)},
    )
    files.append((directory / "objects.npz", "NPZ"))
    return files


def test_every_malformed_scene_file_is_a_one_line_error_naming_it(tmp_path) -> None:
    files = malformed_files(tmp_path)
    assert len(files) >= 50
    for path, expected in files:
        with pytest.raises(SceneFileError) as err:
            load_scene(path)
        message = str(err.value)
        assert message.startswith(str(path)) and "\n" not in message and expected in message, (path, message)


def test_magnitudes_beyond_the_documented_bounds_are_named(tmp_path) -> None:
    for field, value, shown in (
        ("uav_position", [[1e308, 0], [0, 0], [0, 0]], "1e+308"),
        ("target_need", [2**63, 1], "9.22337e+18"),
        ("lam", 1e7, "1e+07"),
    ):
        path = tmp_path / f"{field}.json"
        path.write_text(json.dumps({**valid_scene(), field: value}))
        with pytest.raises(
            SceneFileError, match=re.escape(f"field '{field}' value {shown}") + ".*beyond the supported"
        ):
            load_scene(path)


# ---------------------------------------------------------------- evaluation against an unproven reference


def test_where_no_optimum_is_proven_the_gaps_are_against_the_best_assignment_found(labelled_store) -> None:
    model = model_from_config(transformer(SimpleNamespace(hidden=32, heads=1, layers=1, dropout=0.0, ffn_mult=2)))
    graph = GraphSettings(k_max=16, uav_neighbours=6)
    controls = Controls(keeps=(2,))
    rows, _ = compare_on_split(model, labelled_store, "greedy", graph, 8, torch.device("cpu"), controls=controls)
    assert [r["method"] for r in rows] == [
        "model (greedy)",
        "model-pruned milp (keep 2)",
        "greedy",
        "lap",
        "mcf",
        "mcf + repair",
        "milp",
    ]
    n = len(labelled_store)
    assert all(math.isfinite(r["optimality_gap"]) and r["reference_optimal"] == f"{n}/{n}" for r in rows)
    # scene 3 stopped at its time limit with the optimum as incumbent: nothing beats it, every gap is as before
    status = list(labelled_store.status)
    status[3] = "time_limit"
    unproven = dataclasses.replace(labelled_store, status=status)
    again, _ = compare_on_split(model, unproven, "greedy", graph, 8, torch.device("cpu"), controls=controls)
    assert [r["optimality_gap"] for r in again] == pytest.approx([r["optimality_gap"] for r in rows])
    assert all(r["reference_optimal"] == f"{n - 1}/{n}" for r in again)
    # ... with all idle as incumbent: the reference is the best another method found, the MILP's row 100% off there
    tensors = dict(labelled_store.tensors, label_assignment=labelled_store.tensors["label_assignment"].clone())
    tensors["label_assignment"][int(labelled_store.uav_ptr[3]) : int(labelled_store.uav_ptr[4])] = -1
    objective = labelled_store.objective.clone()
    objective[3] = 0.0
    idle = dataclasses.replace(unproven, tensors=tensors, objective=objective)
    rows, _ = compare_on_split(model, idle, "greedy", graph, 8, torch.device("cpu"), controls=controls)
    assert rows[-1]["method"] == "milp" and rows[-1]["optimality_gap"] == pytest.approx(1 / n)
    assert min(r["optimality_gap"] for r in rows[:-1]) >= 0.0


# ================================================================ issue 30: nothing a user owns is deleted or rewritten


def snapshot(directory: Path) -> dict[str, str]:
    """Every entry below ``directory`` with a digest of its content (a symlink by its target, never followed):
    what a refused or destructive command must leave exactly as it was."""
    found = {}
    for path in sorted(directory.rglob("*")):
        key = str(path.relative_to(directory))
        if path.is_symlink():
            found[key] = f"-> {path.readlink()}"
        elif path.is_file():
            found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[key] = "dir"
    return found


def proven_entry(root: Path, name: str, marker: str | None = None, size: int = 1000) -> Path:
    """A directory shaped like a cache entry, with the marker a build writes (``marker``: its hash, or another)."""
    (root / name / "deep").mkdir(parents=True)
    (root / name / "deep" / "graphs.pt").write_bytes(b"\0" * size)
    (root / name / ".uavgnn-cache").write_text(marker or name[-16:])
    return root / name


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A finished training run (10 steps, last.pt at 5 and 10); tests copy it before touching it."""
    base = tmp_path_factory.mktemp("finished")
    run_cli(*small(base, base / "run", "train.steps=10", "train.ckpt_every=5", "train.eval_every=5"), cwd=base)
    return base


def copy_run(finished_run: Path, tmp_path: Path) -> Path:
    shutil.copytree(finished_run / "run", tmp_path / "run", symlinks=True)
    shutil.copytree(finished_run / "cache", tmp_path / "cache", symlinks=True)
    return tmp_path / "run"


# ---------------------------------------------------------------- destructive commands prove what they delete


@pytest.mark.slow
def test_cache_clear_deletes_only_proven_cache_entries_and_counts_their_real_size(tmp_path) -> None:
    """Audit 1: ``data.cache_dir=/tmp/x`` deleted Documents/ and projects/. Now only entries with uavgnn's marker
    go; a look-alike without it, one whose marker names another hash, a symlinked entry (whose target holds a
    valid marker) and a symlink to the user's files are left alone, and the size counts every file below."""
    user = tmp_path / "x"
    load_or_build(SPEC, SceneDistribution(), SETTINGS, user, workers=1)  # a real cache entry, built by uavgnn
    (user / "Documents").mkdir()
    (user / "Documents" / "thesis.tex").write_text("years of work")
    (user / "projects" / "uav").mkdir(parents=True)
    (user / "projects" / "uav" / "notes.md").write_text("do not lose")
    proven_entry(user, "train-n6-00000000000000aa", marker=None).joinpath(".uavgnn-cache").unlink()  # no marker
    proven_entry(user, "val-n6-00000000000000bb", marker="00000000000000cc")  # marker of another hash
    outside = proven_entry(tmp_path, "test-n6-00000000000000dd")  # a valid entry, but outside the cache dir
    (user / "test-n6-00000000000000dd").symlink_to(outside)
    (user / "elsewhere").symlink_to(tmp_path / "Documents-elsewhere", target_is_directory=True)
    (tmp_path / "Documents-elsewhere").mkdir()
    (tmp_path / "Documents-elsewhere" / "keep.txt").write_text("keep")
    ours = [p.name for p in user.iterdir() if p.name.startswith("train-n6-") and (p / "manifest.json").exists()]
    size = sum(f.stat().st_size for f in (user / ours[0]).rglob("*") if f.is_file())
    kept = {k: v for k, v in snapshot(user).items() if not k.startswith(ours[0])}
    outside_before = snapshot(tmp_path / "Documents-elsewhere") | snapshot(outside)
    proc = run_cli(
        "mode=cache",
        "action=clear",
        "force=true",
        f"data.cache_dir={user}",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert "Traceback" not in proc.stderr and f"{size / 2**20:.2f}" in proc.stdout, proc.stdout + proc.stderr
    assert "removed 1 cache from" in proc.stdout and "left alone in" in proc.stdout
    assert not (user / ours[0]).exists()
    assert snapshot(user) == kept and snapshot(tmp_path / "Documents-elsewhere") | snapshot(outside) == outside_before
    assert not (tmp_path / "run").exists()  # a utility mode that wrote nothing leaves no run directory


@pytest.mark.slow
def test_cache_clear_refuses_a_checkout_home_root_or_system_directory(tmp_path, monkeypatch) -> None:
    """Audit 1: ``data.cache_dir=.`` in a checkout deleted .git, tests, ...; ``/`` offered to delete 23 caches."""
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    proven_entry(checkout, "train-n6-00000000000000ee")  # even a proven entry is not cleared from a checkout
    before = snapshot(checkout)
    proc = run_cli(
        "mode=cache",
        "action=clear",
        "force=true",
        "data.cache_dir=.",
        f"hydra.run.dir={tmp_path / 'r'}",
        cwd=checkout,
        check=False,
    )
    assert proc.returncode == 2 and "is a checkout (it holds .git)" in one_error_line(proc, "error:")
    assert snapshot(checkout) == before
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    for root, reason in (
        ("/", "is the root directory"),
        ("/usr", "/usr is a system directory"),
        (str(tmp_path / "home"), "is a home directory"),
    ):
        with pytest.raises(StorageError, match=re.escape(reason)):
            clear(root, force=True)


@pytest.mark.slow
def test_cache_clear_on_a_read_only_cache_is_one_line_and_deletes_nothing(tmp_path) -> None:
    cache = tmp_path / "cache"
    proven_entry(cache, "train-n6-00000000000000ff")
    before = snapshot(cache)
    clear_it = cli(
        "mode=cache", "action=clear", "force=true", f"data.cache_dir={cache}", f"hydra.run.dir={tmp_path / 'run'}"
    )
    proc = namespace(f"{read_only(cache)} && cd {tmp_path} && {clear_it}; echo EXIT=$?")
    assert "EXIT=2" in proc.stdout and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "Read-only file system (the directory is not writable" in proc.stderr and "removed 0 caches" in proc.stderr
    assert snapshot(cache) == before


def test_cache_verify_lists_only_uavgnn_caches(tmp_path) -> None:
    """A foreign directory is not a damaged cache (``verify`` used to fail on it): it is named as left alone."""
    root = tmp_path / "cache"
    load_or_build(SPEC, SceneDistribution(), SETTINGS, root, workers=1)
    (root / "photos").mkdir()
    assert [row["problem"] for row in cache_entries(root)] == [None] and foreign_entries(root) == ["photos"]
    assert clear_cache(root) == 1 and [p.name for p in root.iterdir()] == ["photos"]
    assert cache_entries(tmp_path / "missing") == [] and clear_cache(tmp_path / "missing") == 0


# ---------------------------------------------------------------- a refused run leaves its directory as it was


@pytest.mark.slow
@pytest.mark.heavy  # ~65 s; the default suite keeps the in-process refusals (tests/test_cli.py) for time
def test_refused_runs_leave_the_run_directory_byte_identical(tmp_path, finished_run, hostile) -> None:
    """Audit 2: a fresh run into a run's directory, or a refused resume, exited 2 but rewrote .hydra/config.yaml
    and overrides.yaml (and mode=compare then showed the new config with the old metrics)."""
    run = copy_run(finished_run, tmp_path)
    before = snapshot(run)
    attempts = {
        "fresh run": ["model=small"],
        "changed seed": ["resume=auto", "seed=3", "model.dropout=0.1"],
        "mode=eval": ["mode=eval", f"ckpt={run / 'best.pt'}"],
        "mode=solve": ["mode=solve", "solver=greedy"],
        "mode=compare": ["mode=compare", f"path=[{run},{run}]"],
    }
    lines = {}
    for what, extra in attempts.items():
        proc = run_cli(*small(tmp_path, run, "train.steps=10", *extra), cwd=tmp_path, check=False)
        lines[what] = one_error_line(proc, "error:")
        assert proc.returncode == 2 and lines[what], what
        assert snapshot(run) == before, what
    refused = lines["changed seed"]
    assert "would break exact resumption" in refused and "model.dropout: 0.0 -> 0.1" in refused
    assert "seed: 0 -> 3" in refused
    shutil.copy(hostile[0], run / "last.pt")  # a resume refused while loading its checkpoint
    before = snapshot(run)
    proc = run_cli(*small(tmp_path, run, "train.steps=10", "resume=auto"), cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "would run code" in one_error_line(proc, "error:")
    assert snapshot(run) == before and not hostile[1].exists()


@pytest.mark.slow
def test_a_sweep_whose_jobs_refuse_their_directories_fails_and_leaves_them_untouched(tmp_path, finished_run) -> None:
    """Review of issue 30: a sweep re-run into a sweep directory whose jobs hold runs refused every job without a
    record, and exited 0. The refusals are now recorded beside the jobs and the sweep fails, naming them."""
    sweep = tmp_path / "sweep"
    for job in ("0-seed:0", "1-seed:1"):  # the folders the sweep below names its jobs
        shutil.copytree(finished_run / "run", sweep / job)
    before = snapshot(sweep)
    proc = run_cli(
        "-m",
        *SMALL,
        f"data.cache_dir={tmp_path / 'cache'}",
        "seed=0,1",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 1 and "2 of 2 jobs failed" in proc.stderr and "Traceback" not in proc.stderr
    assert "job 0-seed:0: RunDirectoryError" in proc.stderr and "already holds a run" in proc.stderr
    assert {k: v for k, v in snapshot(sweep).items() if k.startswith(("0", "1"))} == before
    assert sorted(p.name for p in sweep.glob("failed-*.json")) == ["failed-0-seed:0.json", "failed-1-seed:1.json"]


def test_rewritten_files_keep_their_permissions(tmp_path) -> None:
    """Review of issue 30: mkstemp's 0600 survived the rename, so a rewritten history or config lost its
    readers on a shared cluster directory. A rewrite keeps the file's mode; a new file gets 0666 less the umask."""
    shared = tmp_path / "metrics.jsonl"
    shared.write_text("old")
    shared.chmod(0o644)
    atomic_write(shared, b"new")
    created = tmp_path / "new.json"
    atomic_write(created, b"{}")
    umask = os.umask(0)
    os.umask(umask)
    assert shared.read_bytes() == b"new" and shared.stat().st_mode & 0o777 == 0o644
    assert created.stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.slow
def test_a_second_sigterm_ends_a_run_stuck_in_a_long_computation_at_once(tmp_path) -> None:
    """Review of issue 30: Python runs a SIGTERM handler only between bytecodes, so a run inside a long MILP solve
    ignored SIGTERM until the solver returned. A second signal now ends it at once, saying so."""
    proc = start(
        "mode=solve",
        "solver=milp",
        "solve.n_uav=3000",
        "solve.time_limit=120",
        "solve.gap_reference=false",
        "logger=none",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    wait_for(
        lambda: "scene: 3,000 UAVs" in (tmp_path / "bg.out").read_text() or proc.poll() is not None,
        "the solver to start",
    )
    time.sleep(2.0)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    began = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    err = (tmp_path / "bg.err").read_text()
    assert proc.returncode == 143 and time.perf_counter() - began < 5, err[-2000:]
    assert "interrupted by SIGTERM (a second signal): exiting now" in err and "Traceback" not in err


@pytest.mark.slow
def test_sigterm_to_the_process_group_leaves_no_worker_traceback(tmp_path) -> None:
    """Review of issue 30: a SIGTERM to the process group (scancel, kill -- -pgid) also kills the loader's workers,
    and the step under way failed with a traceback. The run now stops at the last completed step, with last.pt."""
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "run.py"),
            *small(
                tmp_path,
                run,
                "train.steps=100000",
                "hardware.loader=pyg",
                "hardware.num_workers=2",
                "train.ckpt_every=100000",
            ),
        ],
        cwd=tmp_path,
        stdout=(tmp_path / "bg.out").open("w"),
        stderr=(tmp_path / "bg.err").open("w"),
        start_new_session=True,
    )
    wait_for(lambda: (run / "metrics.jsonl").exists() and logged(run), "training to start")
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=60)
    err = (tmp_path / "bg.err").read_text()
    assert proc.returncode == 143 and "Traceback" not in err and "interrupted by SIGTERM at step" in err, err[-3000:]
    assert torch.load(run / "last.pt", weights_only=True)["state"]["step"] > 0


@pytest.mark.slow
@pytest.mark.heavy  # ~20 s: left out of the default suite for time
def test_a_fresh_run_refuses_a_directory_of_user_files_and_tidies_only_what_it_made(tmp_path) -> None:
    """A directory holding anyone's files is not a run directory: refused before anything is written; a refused
    run removes the directories it created, never one the user made."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "results.csv").write_text("my,results")
    (mine / "notes.txt").write_text("mine")
    before = snapshot(mine)
    proc = run_cli(*small(tmp_path, mine), cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "already holds files (notes.txt, results.csv)" in one_error_line(proc, "error:")
    assert snapshot(mine) == before
    empty = tmp_path / "empty"
    empty.mkdir()
    created = tmp_path / "new" / "parent" / "run"
    for directory in (empty, created):
        proc = run_cli(*small(tmp_path, directory, "model.hidden=0"), cwd=tmp_path, check=False)
        assert proc.returncode == 2 and "model.hidden=0" in one_error_line(proc, "error:")
    assert empty.is_dir() and not list(empty.iterdir())  # the user's (empty) directory stays
    assert not (tmp_path / "new").exists()  # what the refused run created is gone, parents included


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


# ---------------------------------------------------------------- the history: atomic rewrites, damage named


@pytest.mark.heavy  # the suite's time: pytest -m heavy tests/test_faults.py
def test_kill_9_during_the_history_rewrite_leaves_the_old_or_the_new_history(tmp_path, finished_run) -> None:
    """Audit 3: kill -9 while resume rewrote a 600,000-row history left 77,673 rows. The rewrite is now written
    beside the file, flushed and renamed: killed while the new file is being written, the history is whole."""
    run = copy_run(finished_run, tmp_path)
    rows = read_history(run)
    padding = [{"step": 0, "note": i} for i in range(600_000)]  # old rows: all kept by the rewrite
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in padding + rows))
    original = (run / "metrics.jsonl").read_bytes()
    caught = False
    proc = start(*small(tmp_path, run, "train.steps=12", "resume=auto"), cwd=tmp_path)
    while proc.poll() is None and not caught:  # the rewrite takes tens of ms: watch for its temp file, kill -9 at once
        caught = any(name.startswith(".metrics.jsonl.") for name in os.listdir(run))
        time.sleep(0.0002)
    proc.kill()
    proc.wait(timeout=30)
    assert caught, "the rewrite was never caught in progress"
    assert (run / "metrics.jsonl").read_bytes() == original  # killed before the rename: the old history, whole
    resumed = run_cli(*small(tmp_path, run, "train.steps=12", "resume=auto"), cwd=tmp_path)
    history = read_history(run)
    assert len([r for r in history if "note" in r]) == 600_000 and [r for r in history if "val/optimality_gap" in r]
    assert "Traceback" not in resumed.stderr


@pytest.mark.slow
def test_a_history_cut_short_is_damaged_and_the_resume_refused_untouched(tmp_path, finished_run) -> None:
    """A history shorter than what the checkpoint saw written is damage, not a torn line: refused, named."""
    run = copy_run(finished_run, tmp_path)
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text("".join(lines[: len(lines) // 2]))
    before = snapshot(run)
    proc = run_cli(*small(tmp_path, run, "train.steps=12", "resume=auto"), cwd=tmp_path, check=False)
    line = one_error_line(proc, "is damaged")
    assert proc.returncode == 2 and "rows up to step 10" in line and "restore it from a copy" in line
    assert snapshot(run) == before


@pytest.mark.slow
def test_disk_full_during_the_history_rewrite_keeps_the_old_history(tmp_path, finished_run) -> None:
    run = copy_run(finished_run, tmp_path)
    rows = read_history(run)
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": 0, "pad": "x" * 100}) + "\n" for _ in range(2500))
        + "".join(json.dumps(r) + "\n" for r in rows)
    )
    size = sum(p.stat().st_size for p in run.iterdir() if p.is_file())
    full = tmp_path / "full"
    full.mkdir()
    resume = cli(*small(tmp_path, full / "run", "train.steps=12", "resume=auto"))
    proc = namespace(
        f"mount -t tmpfs -o size={size + 96 * 1024} tmpfs {full} && cp -a {run} {full}/run && "
        f"cd {tmp_path} && {resume}; echo EXIT=$?; sha256sum {full}/run/metrics.jsonl"
    )
    assert "EXIT=2" in proc.stdout and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"cannot write {full / 'run' / 'metrics.jsonl'}: No space left on device" in proc.stderr
    assert hashlib.sha256((run / "metrics.jsonl").read_bytes()).hexdigest() in proc.stdout  # the old history, whole


# ---------------------------------------------------------------- sweeps: workers die with the sweep, locks


@pytest.mark.heavy  # the suite's time: pytest -m heavy tests/test_faults.py
def test_joblib_sweep_workers_die_with_a_killed_sweep_and_their_runs_resume(tmp_path) -> None:
    """Audit 4: after kill -9 of a joblib sweep its workers trained on, held their runs' locks (a resume was
    refused 'in use by pid ...') and ignored SIGTERM. Now each stops at the end of a step with last.pt."""
    sweep = tmp_path / "sweep"
    args = [
        *SMALL,
        f"data.cache_dir={tmp_path / 'cache'}",
        "train.steps=100000",
        "train.ckpt_every=100000",
        "hardware.threads=1",
    ]
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "run.py"),
            "-m",
            "hydra/launcher=joblib",
            *args,
            "seed=0,1",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    jobs = [sweep / "0-seed:0", sweep / "1-seed:1"]
    wait_for(lambda: all((d / "metrics.jsonl").exists() and logged(d) for d in jobs), "both jobs to train")
    workers = [pid for pid, (parent, _) in process_table().items() if parent == proc.pid]
    proc.kill()
    proc.wait(timeout=30)
    wait_for(lambda: not living(workers), f"the sweep's workers {workers} to exit", timeout=60)
    for job in jobs:
        assert torch.load(job / "last.pt", weights_only=True)["state"]["step"] > 0
        assert "the sweep's main process" in (job / "run.log").read_text()
    resumed = run_cli(
        *args[:-3],
        f"data.cache_dir={tmp_path / 'cache'}",
        "seed=0",
        "resume=auto",
        f"train.steps={torch.load(jobs[0] / 'last.pt', weights_only=True)['state']['step'] + 2}",
        f"hydra.run.dir={jobs[0]}",
        cwd=tmp_path,
    )
    assert "in use by" not in resumed.stderr


@pytest.mark.slow
def test_a_lock_held_by_a_dead_process_is_taken_over_even_if_its_child_lives(tmp_path) -> None:
    """flock locks were inherited by forked children (label workers, loaders): a dead run's surviving child kept
    its directory locked. The lock is now the process's own (lockf): when the holder dies, it is free."""
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import os, sys, time; from pathlib import Path; from uavgnn.runs.lock import hold_lock; "
                f"hold_lock(Path({str(run)!r})); child = os.fork(); "
                "time.sleep(60) if child == 0 else (print(child, flush=True), time.sleep(60))"
            ),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    child = int(holder.stdout.readline())
    try:
        holder.kill()
        holder.wait(timeout=10)
        assert living([child])  # the forked child lives on
        proc = run_cli(*small(tmp_path, run, "train.steps=2"), cwd=tmp_path, check=False)
        assert proc.returncode == 0 and "in use by" not in proc.stderr, proc.stderr[-2000:]
    finally:
        os.kill(child, signal.SIGKILL)


# ---------------------------------------------------------------- checkpoint contents are verified, not trusted


def masac_cfg(tmp_path: Path, *overrides: str):
    cfg = compose_cfg(
        "experiment=debug",
        "algorithm=masac",
        "model=mlp",
        "logger=jsonl",
        "env.n_envs=4",
        "algorithm.learning_starts=8",
        "algorithm.buffer_size=64",
        "model.hidden=16",
        "algorithm.critic_hidden=16",
        "hardware.batch_size=8",
        "env.val_episodes=4",
        f"data.cache_dir={tmp_path / 'cache'}",
        *overrides,
    )
    with open_dict(cfg):
        cfg.train.update(steps=6, eval_every=6, ckpt_every=3, log_every=3, warmup_steps=0, schedule="plateau")
    return cfg


def flip_byte_of_tensor(path: Path, holding: bytes | None = None) -> None:
    """Flip the first byte of a tensor record of a ``torch.save`` zip, the one ``holding`` these bytes (else the
    largest): torch reads tensor bytes without checking the zip's CRC, so only our checksums see it."""
    with zipfile.ZipFile(path) as archive:
        records = [i for i in archive.infolist() if "/data/" in i.filename]
        record = (
            next(i for i in records if archive.read(i) == holding)
            if holding is not None
            else max(records, key=lambda i: i.file_size)
        )
    raw = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", raw[record.header_offset + 26 : record.header_offset + 30])
    raw[record.header_offset + 30 + name_len + extra_len] ^= 0x40
    path.write_bytes(bytes(raw))


def flip_byte_of_replay_observations(path: Path) -> None:
    flip_byte_of_tensor(path, torch.load(path, weights_only=True)["data"]["buffer"]["data"]["obs"].numpy().tobytes())


def rewritten(path: Path, change) -> None:
    """``change(ckpt)`` applied and the checksums made to agree: content that is consistent but invalid."""
    ckpt = torch.load(path, weights_only=True)
    change(ckpt)
    del ckpt["checksums"]
    ckpt["checksums"] = part_checksums(ckpt)
    torch.save(ckpt, path)


@pytest.mark.slow
def test_last_pt_parts_are_verified_and_invalid_replay_or_env_state_is_named(tmp_path) -> None:
    """Audit 5: a flipped byte in MASAC's replay loaded silently; a replay size beyond capacity was a traceback;
    a NaN in the environment state diverged and was blamed on the LR."""
    run = tmp_path / "run"
    run_train(masac_cfg(tmp_path), run)
    args = [
        "experiment=debug",
        "algorithm=masac",
        "model=mlp",
        "logger=jsonl",
        "env.n_envs=4",
        "algorithm.learning_starts=8",
        "algorithm.buffer_size=64",
        "model.hidden=16",
        "algorithm.critic_hidden=16",
        "hardware.batch_size=8",
        "env.val_episodes=4",
        "train.steps=6",
        "train.eval_every=6",
        "train.ckpt_every=3",
        "train.log_every=3",
        "train.warmup_steps=0",
        "train.schedule=plateau",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={run}",
        "resume=auto",
    ]
    pristine = (run / "last.pt").read_bytes()
    damages = {
        "part 'data.buffer' (replay buffer) fails its checksum": flip_byte_of_replay_observations,
        "replay buffer: size 100 is outside 0..64": lambda p: rewritten(
            p, lambda c: c["data"]["buffer"].update(size=100)
        ),
        "replay buffer: cursor 70 does not fit": lambda p: rewritten(
            p, lambda c: c["data"]["buffer"].update(cursor=70)
        ),
        "environment state: pos holds non-finite values": lambda p: rewritten(
            p, lambda c: c["data"]["env"]["tensors"]["pos"].view(-1)[0].fill_(math.nan)
        ),
        "the batch drawn ahead": lambda p: rewritten(
            p, lambda c: c["data"].update(ahead=(7, torch.tensor([0, 99]), torch.ones(2)))
        ),
    }
    for message, damage in damages.items():  # the first through the program, the others through run_train
        (run / "last.pt").write_bytes(pristine)
        damage(run / "last.pt")
        before = snapshot(run)
        prefetch = "optim.prefetch=true" if "ahead" in message else "optim.prefetch=false"
        if message.startswith("part"):
            proc = run_cli(*args, prefetch, cwd=tmp_path, check=False)
            line = one_error_line(proc, "error:")
            assert proc.returncode == 2 and message in line and "algorithm=masac, model=mlp" in line, line
        else:
            with pytest.raises(CheckpointError, match=re.escape(message)) as err:
                run_train(masac_cfg(tmp_path, "resume=auto", prefetch), run)
            assert "algorithm=masac, model=mlp" in str(err.value) and "\n" not in str(err.value)
        assert snapshot(run) == before, message  # no resume event, nothing written


def test_a_damaged_best_pt_or_checksum_table_is_refused_on_every_load(tmp_path, finished_run) -> None:
    best = tmp_path / "best.pt"
    shutil.copy(finished_run / "run" / "best.pt", best)
    flip_byte_of_tensor(best)
    with pytest.raises(CheckpointError, match=r"part '(model|policy|ema|optimizer)' .* fails its checksum"):
        load_policy(best)
    ckpt = torch.load(finished_run / "run" / "best.pt", weights_only=True)
    ckpt["checksums"] = "gone"
    torch.save(ckpt, best)
    with pytest.raises(CheckpointError, match="its checksums are damaged"):
        load_checkpoint(best)


@pytest.mark.heavy  # the suite's time: pytest -m heavy tests/test_faults.py
def test_every_weight_load_names_the_checkpoints_kind_and_what_takes_it(tmp_path, finished_run) -> None:
    """Audit 6: weight mismatches on init_from and resume were tracebacks, a failed resume appended a spurious
    'resume' event, a dynamics checkpoint as REINFORCE's init_from was a traceback, and the advice was wrong."""
    dyn = tmp_path / "dyn"
    cfg = compose_cfg(
        "algorithm=dynamics",
        "logger=jsonl",
        f"data.cache_dir={tmp_path / 'dcache'}",
        "algorithm.train_envs=4",
        "algorithm.eval_envs=2",
        "algorithm.rollout_steps=40",
        "algorithm.window=12",
        "algorithm.burn_in=4",
        "model.hidden=8",
        "model.layers=2",
        "hardware.batch_size=8",
        "train.steps=2",
        "train.eval_every=2",
        "train.ckpt_every=2",
    )
    run_train(cfg, dyn)
    proc = run_cli(
        *small(tmp_path, tmp_path / "rl", "algorithm=reinforce", f"algorithm.init_from={dyn / 'best.pt'}"),
        cwd=tmp_path,
        check=False,
    )
    line = one_error_line(proc, "error:")
    assert (
        proc.returncode == 2
        and "(algorithm=dynamics, model=tcn: a dynamics model; resume=auto "
        "hydra.run.dir=<its run> takes it): algorithm.init_from= takes an assignment "
        "policy (algorithm=imitation or reinforce)"
        in line
    )
    proc = run_cli(*small(tmp_path, tmp_path / "ev", "mode=eval", f"ckpt={dyn / 'best.pt'}"), cwd=tmp_path, check=False)
    line = one_error_line(proc, "error:")
    assert (
        proc.returncode == 2
        and "mode=eval takes an assignment policy (algorithm=imitation or reinforce) or an "
        "environment policy (algorithm=coma, mappo or masac)"
        in line
    )
    run = copy_run(finished_run, tmp_path)
    for part, key in (("weights", "model"), ("optimiser state", "optimizer")):
        ckpt = torch.load(finished_run / "run" / "last.pt", weights_only=True)
        del ckpt["checksums"]  # as written by an older version whose networks differed
        if key == "model":
            ckpt["model"] = {name: value[..., :1] for name, value in ckpt["model"].items()}
        else:
            ckpt["optimizer"]["param_groups"] = []
        torch.save(ckpt, run / "last.pt")
        before = snapshot(run)
        with pytest.raises(CheckpointError) as err:
            run_train(
                compose_cfg(
                    *SMALL,
                    f"data.cache_dir={tmp_path / 'cache'}",
                    "train.steps=12",
                    "train.ckpt_every=5",
                    "train.eval_every=5",
                    "resume=auto",
                ),
                run,
            )
        assert f"its {part} do not fit" in str(err.value) and "algorithm=imitation, model=tiny" in str(err.value)
        assert snapshot(run) == before  # no spurious resume event


# ---------------------------------------------------------------- config errors, damaged runs, memory, system paths


@pytest.mark.heavy  # the suite's time: pytest -m heavy tests/test_faults.py
def test_unresolvable_interpolations_are_one_line_and_leave_nothing_behind(tmp_path) -> None:
    """Audit 7: ``${oc.env:NOPE}`` in a key was a traceback (leaving .hydra/, run.log and a lock behind), and in
    hydra.run.dir 'an error during Hydra's exception formatting'."""
    for override, key in (
        ("model.hidden=${oc.env:NOPE}", "model.hidden"),
        ("data.cache_dir=${oc.env:NOPE}", "data.cache_dir"),
        (f"hydra.run.dir=${{oc.env:NOPE}}/{tmp_path}/x", "hydra.run.dir"),
    ):
        run = tmp_path / "run"
        proc = run_cli(
            *SMALL, override, *([] if key == "hydra.run.dir" else [f"hydra.run.dir={run}"]), cwd=tmp_path, check=False
        )
        line = one_error_line(proc, "error:")
        assert proc.returncode == 2 and f"{key}: cannot be resolved" in line and "NOPE" in line, line
        assert not run.exists() and "exception formatting" not in proc.stderr


@pytest.mark.slow
def test_compare_lists_damaged_runs_instead_of_failing(tmp_path, finished_run) -> None:
    """Audit 8: a truncated summary.json, a summary.json of [] and a torn middle line of metrics.jsonl were
    tracebacks in mode=compare; so would be a broken .hydra/config.yaml."""
    sweep = tmp_path / "sweep"
    for name in "abcde":
        shutil.copytree(finished_run / "run", sweep / name)
    (sweep / "a" / "summary.json").write_text((finished_run / "run" / "summary.json").read_text()[:40])
    (sweep / "b" / "summary.json").write_text("[]")
    lines = (sweep / "c" / "metrics.jsonl").read_text().splitlines()
    (sweep / "c" / "metrics.jsonl").write_text("\n".join([lines[0], lines[1][:15], *lines[2:]]) + "\n")
    (sweep / "d" / ".hydra" / "config.yaml").write_text("model: [unclosed\n")
    proc = run_cli("mode=compare", f"path={sweep}", f"hydra.run.dir={tmp_path / 'cmp'}", cwd=tmp_path)
    assert "Traceback" not in proc.stderr
    damaged = {line.split()[1] for line in proc.stderr.splitlines() if "is damaged:" in line}
    assert damaged == {"a", "b", "c", "d"}
    report = (sweep / "comparison.md").read_text()
    assert "Damaged runs:" in report and "- b: summary.json: expected a JSON object" in report
    assert "line 2 is not a JSON object" in report and "config.yaml" in report


def test_memory_estimates_refuse_before_allocating(tmp_path) -> None:
    """Audit 9: a scene of ~2e9 feasible pairs ran 85 s to 6.7 GB and died; an 8 GB JSON scene was read whole;
    env.n_envs=10**8 allocated until it failed. Each is now refused first, with the estimate and the limit."""
    rng = np.random.default_rng(0)
    n, m = 100_000, 20_000  # every UAV reaches every target: 2e9 pairs, ranges within the documented bound
    scene = Scene(
        rng.random((n, 2)) * 10, np.full(n, 100.0), rng.random((m, 2)) * 10, np.ones(m, np.int64), np.ones(m), 0.1
    )
    start_time = time.perf_counter()
    with pytest.raises(
        MemoryBudgetError,
        match=r"about 2e\+09 feasible UAV-target pairs would need about 178\.8 GB "
        r"of memory, but .* available .*shorten the UAVs' ranges",
    ):
        feasible_pairs(scene)
    assert time.perf_counter() - start_time < 30  # counted on a sample, never allocated
    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate(1 << 40)  # a 1 TB sparse file: nothing is read
    with pytest.raises(SceneFileError, match=r"huge.json: reading this JSON scene file would need about 5120\.0 GB"):
        load_scene(huge)
    settings = EnvSettings(n_uav=64)
    with pytest.raises(MemoryBudgetError, match=r"env.n_envs=1000000: 1,000,000 environments of 64 UAVs would need"):
        UAVEnv(settings, SceneDistribution(), 1_000_000, torch.device("cpu"), seed=0)
    with pytest.raises(MemoryBudgetError, match=r"algorithm.buffer_size=1000000000: a replay buffer .*lower algorithm"):
        ReplayBuffer(
            10**9,
            {
                "obs": (4, 49),
                "state": (31,),
                "next_obs": (4, 49),
                "next_state": (31,),
                "action": (4, 2),
                "reward": (4,),
                "done": (),
            },
            torch.device("cpu"),
        )
    with pytest.raises(ConfigError, match=re.escape("env.n_envs=100000000 must be in [1, 1.04858e+06]")):
        check_config(compose_cfg("algorithm=masac", "model=mlp", "env.n_envs=100000000"))


@pytest.mark.slow
def test_a_scene_too_large_for_memory_is_one_line_in_mode_solve(tmp_path) -> None:
    rng = np.random.default_rng(0)
    n, m = 100_000, 20_000
    path = tmp_path / "dense.npz"
    np.savez(
        path,
        uav_position=rng.random((n, 2)) * 10,
        uav_range=np.full(n, 100.0),
        target_position=rng.random((m, 2)) * 10,
        target_need=np.ones(m, np.int64),
        target_value=np.ones(m),
        lam=np.float64(0.1),
    )
    proc = run_cli(
        "mode=solve",
        "solver=greedy",
        "task=file",
        f"task.file={path}",
        "logger=none",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2 and "feasible UAV-target pairs would need" in one_error_line(proc, "error:")


@pytest.mark.slow
@pytest.mark.heavy  # ~20 s: left out of the default suite for time
def test_system_directories_are_refused_as_run_sweep_or_cache_directories(tmp_path) -> None:
    """Audit 10: as root, hydra.run.dir=/etc wrote checkpoints, logs and a picture into /etc."""
    for override, key in (
        ("hydra.run.dir=/usr/share/uavgnn-drill", "hydra.run.dir=/usr/share/uavgnn-drill"),
        ("data.cache_dir=/usr/lib/uavgnn-drill", "data.cache_dir=/usr/lib/uavgnn-drill"),
    ):
        proc = run_cli(
            *SMALL,
            override,
            *([] if "hydra" in override else [f"hydra.run.dir={tmp_path / 'r'}"]),
            cwd=tmp_path,
            check=False,
        )
        line = one_error_line(proc, "error:")
        assert proc.returncode == 2 and key in line and "system directory" in line, line
    assert not Path("/usr/share/uavgnn-drill").exists() and not Path("/usr/lib/uavgnn-drill").exists()
    proc = run_cli("-m", *SMALL, "seed=0,1", "hydra.sweep.dir=/boot/uavgnn-drill", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "hydra.sweep.dir=/boot/uavgnn-drill" in one_error_line(proc, "error:")


def test_system_paths_are_the_systems_own_trees_not_every_path_below_usr_or_var() -> None:
    """Review of issue 30: a rule refusing all of /usr and /var refused Docker's /usr/src/app, Jenkins'
    /var/lib/jenkins/workspace and Fedora Atomic's /var/home; those are allowed, the system's own are not."""
    for refused in (
        "/",
        "/etc/x",
        "/usr",
        "/usr/src",
        "/usr/lib/x",
        "/usr/local/bin/x",
        "/var",
        "/var/lib",
        "/run/user",
        "/boot/x",
        "/dev/null",
        "/proc/1",
    ):
        assert system_path_problem(refused), refused
    for allowed in (
        "/usr/src/app/outputs",
        "/var/lib/jenkins/workspace",
        "/var/home/alice/runs",
        "/run/user/1000/x",
        "/dev/shm/cache",
        "/var/tmp/x",
        "/usr/local/src/p",
        "/tmp/x",
        "/home/alice/x",
    ):
        assert system_path_problem(allowed) is None, allowed


# ---------------------------------------------------------------- the partial items: statistics, signals, wandb


def window_cfg(tmp_path: Path, algorithm: str):
    """Short runs of 12 steps with rows every 5 (no evaluation, no checkpoint before the end)."""
    if algorithm == "imitation":
        cfg = tiny_cfg(tmp_path, "train.schedule=plateau")
    elif algorithm == "masac":
        cfg = masac_cfg(tmp_path)
    else:
        cfg = compose_cfg(
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
    """Audit 11: after a resume the first row averaged only the new process's steps (and could lack the
    per-agent keys). A SIGTERM at step 7 (rows every 5) now saves the log windows - the loop's and the
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


@pytest.mark.heavy  # the suite's time: pytest -m heavy tests/test_faults.py
def test_sigterm_in_the_test_phase_or_rollouts_is_one_line_and_the_command_can_be_repeated(tmp_path) -> None:
    """Audit 11: SIGTERM during a test phase or the dynamics rollouts exited 143 silently; after the rollouts an
    empty metrics.jsonl made the same command refused."""
    run = tmp_path / "run"
    args = small(tmp_path, run, "train.steps=2", "data.n_uav=12", "data.test_scenes=3000")  # a long test phase
    proc = start(*args, cwd=tmp_path)
    wait_for(lambda: (run / "last.pt").exists() or proc.poll() is not None, "training to finish")
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    err = (tmp_path / "bg.err").read_text()
    assert proc.returncode == 143 and "Traceback" not in err, err[-3000:]
    notice = [line for line in err.splitlines() if "interrupted by SIGTERM (mode=train)" in line]
    assert len(notice) == 1 and "resume with:" in notice[0] and f"hydra.run.dir={run}" in notice[0]
    dyn = tmp_path / "dyn"
    dyn_args = [
        "algorithm=dynamics",
        "logger=jsonl",
        f"data.cache_dir={tmp_path / 'dcache'}",
        "train.steps=2",
        "algorithm.train_envs=2048",
        "algorithm.rollout_steps=400",
        "model.hidden=8",
        f"hydra.run.dir={dyn}",
    ]
    proc = start(*dyn_args, cwd=tmp_path)
    wait_for(
        lambda: (
            "rollouts" in (tmp_path / "bg.err").read_text() + (tmp_path / "bg.out").read_text()
            or proc.poll() is not None
        ),
        "the rollout simulation",
    )
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    err = (tmp_path / "bg.err").read_text()
    assert proc.returncode == 143 and "interrupted by SIGTERM (mode=train)" in err and "Traceback" not in err
    assert not (dyn / "metrics.jsonl").exists()  # nothing that makes the same command refused
    again = run_cli(
        *dyn_args[:4],
        "algorithm.train_envs=2",
        "algorithm.rollout_steps=60",
        "model.hidden=8",
        f"hydra.run.dir={dyn}",
        "train.eval_every=2",
        "algorithm.eval_envs=4",
        cwd=tmp_path,
        check=False,
    )
    assert "already holds" not in again.stderr and again.returncode == 0, again.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.filterwarnings("error::RuntimeWarning")  # a dashboard switched off would only warn: fail on it
def test_wandb_online_without_an_answer_falls_back_to_offline_in_bounded_time(tmp_path, monkeypatch, capsys) -> None:
    """Audit 11: wandb.init with a key and no network stalled ~90 s. A server that accepts connections and never
    answers now costs logger.init_timeout seconds, then the run logs offline and says so in one line."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    settings = compose_cfg("logger=wandb", "logger.mode=online", "logger.init_timeout=3").logger
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(tmp_path)
    began = time.perf_counter()
    logger = MetricLogger(Path("run"), settings, config={"seed": 0})  # relative, as Hydra's run.dir usually is
    try:
        logger.log({"train/loss": 1.0}, step=1)
    finally:
        logger.finish()
        silent.close()
    assert time.perf_counter() - began < 45
    printed = capsys.readouterr()
    err = printed.err.splitlines()
    notice = [line for line in err if "logging offline instead" in line]
    assert len(notice) == 1 and "online start failed within 3 s" in notice[0]
    offline = list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("*.wandb")) and read_history(tmp_path / "run")
    hint = next(line for line in printed.out.splitlines() if "upload: wandb sync " in line).split("wandb sync ")[1]
    assert Path(hint).is_absolute() and glob.glob(hint) == [str(offline[0])]  # works from any directory


@pytest.mark.heavy  # the suite's time: pytest -m heavy tests/test_faults.py
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


@pytest.mark.slow
def test_checkpoints_of_the_wrong_kind_name_what_takes_them(tmp_path, finished_run) -> None:
    """An assignment policy as a dynamics model's rollout policy, and a run directory that is a file."""
    proc = run_cli(
        "algorithm=dynamics",
        "logger=jsonl",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"algorithm.rollout_policy={finished_run / 'run' / 'best.pt'}",
        f"hydra.run.dir={tmp_path / 'r'}",
        cwd=tmp_path,
        check=False,
    )
    line = one_error_line(proc, "error:")
    assert proc.returncode == 2 and "(algorithm=imitation, model=tiny: an assignment policy; mode=eval ckpt=" in line
    assert "algorithm.rollout_policy= takes an environment policy (algorithm=coma, mappo or masac)" in line
    (tmp_path / "afile").write_text("mine")
    proc = run_cli(*small(tmp_path, tmp_path / "afile"), cwd=tmp_path, check=False)
    assert proc.returncode == 2 and f"cannot write {tmp_path / 'afile'}" in one_error_line(proc, "error:")
    assert (tmp_path / "afile").read_text() == "mine"
