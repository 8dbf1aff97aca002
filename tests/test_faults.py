"""Fault drills (issue 13): hostile checkpoints, signals, divergence, damaged caches, read-only and full disks,
concurrent runs, changed configs on resume. Each drill runs the real program (``run.py`` in a subprocess, or
the training loop in-process where a fault has to be injected) and checks what a user would see: one line
naming the problem, a non-zero exit, and nothing already computed lost. RELIABILITY.md lists them."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import shutil
import signal
import subprocess
import sys
import time
import typing
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import ROOT, run_cli
from hydra import compose, initialize_config_dir
from omegaconf import ListConfig, OmegaConf, open_dict

from uavgnn.algorithms import imitation
from uavgnn.config import Config, register_configs
from uavgnn.data.cache import BuildSettings, SplitSpec, cache_entries, load_or_build, verify
from uavgnn.errors import CheckpointError, ConfigError, RunDirectoryError, SceneFileError, TrainingDiverged
from uavgnn.evaluation.methods import compare_on_split
from uavgnn.loggers import read_history
from uavgnn.models import model_from_config
from uavgnn.modes.train import run_train
from uavgnn.problem.graphs import GraphSettings
from uavgnn.problem.scene_io import load_scene
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.training.checkpoint import load_checkpoint, load_model, weights_norm
from uavgnn.training.resume import check_resume_config, config_changes, resume_checkpoint
from uavgnn.validation import RANGES, validate

SMALL = ["experiment=debug", "model=tiny", "data.n_uav=6", "data.train_scenes=64", "data.val_scenes=8",
         "data.test_scenes=8", "hardware.batch_size=8", "train.log_every=5", "train.warmup_steps=2", "logger=jsonl"]
register_configs()


def small(tmp_path: Path, run: Path | str, *extra: str) -> list[str]:
    return [*SMALL, f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={run}", *extra]


def start(*overrides: str, cwd: Path) -> subprocess.Popen:
    """``run.py`` in the background, its output in files (a pipe nobody reads could block it)."""
    return subprocess.Popen([sys.executable, str(ROOT / "run.py"), *overrides], cwd=cwd,
                            stdout=(cwd / "bg.out").open("w"), stderr=(cwd / "bg.err").open("w"))


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
@pytest.mark.parametrize("path_kind", ["eval", "resume", *(pytest.param(kind, marks=pytest.mark.heavy)
                                                             for kind in ("solve", "init_from"))])
def test_a_checkpoint_that_would_run_code_is_refused_on_every_path(tmp_path, hostile, path_kind) -> None:
    ckpt, marker = hostile
    run = tmp_path / "run"
    args = {"eval": ["mode=eval", f"ckpt={ckpt}"], "solve": ["mode=solve", "solver=model", f"ckpt={ckpt}"],
            "init_from": ["algorithm=reinforce", f"algorithm.init_from={ckpt}"], "resume": ["resume=true"]}[path_kind]
    if path_kind == "resume":
        run.mkdir()
        shutil.copy(ckpt, run / "last.pt")
        ckpt = run / "last.pt"
    proc = run_cli(*small(tmp_path, run, *args), cwd=tmp_path, check=False)
    assert proc.returncode == 2
    line = one_error_line(proc, "refused")
    assert str(ckpt) in line and "would run code" in line
    assert not marker.exists()  # the payload never ran
    assert "refused" in (run / "run.log").read_text()  # the console's error is in run.log too


def test_truncated_text_and_foreign_checkpoints_are_one_line_errors(tmp_path, hostile) -> None:
    ckpt, marker = hostile
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(ckpt.read_bytes()[:200])
    text = tmp_path / "notes.pt"
    text.write_text("not a checkpoint\n")
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, foreign)
    for path, reason in ((ckpt, "would run code"), (truncated, "unreadable, truncated"),
                         (text, "unreadable, truncated"), (foreign, "not a uavgnn checkpoint"),
                         (tmp_path / "missing.pt", "no such file")):
        with pytest.raises(CheckpointError) as err:
            load_model(path)
        assert str(path) in str(err.value) and reason in str(err.value) and "\n" not in str(err.value)
    assert not marker.exists()


@pytest.mark.slow
def test_text_file_as_ckpt_on_the_command_line(tmp_path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    proc = run_cli(*small(tmp_path, tmp_path / "run", "mode=solve", "solver=model", f"ckpt={text}"), cwd=tmp_path,
                   check=False)
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
@pytest.mark.parametrize("sig", [signal.SIGKILL, *(pytest.param(s, marks=pytest.mark.heavy)
                                                  for s in (signal.SIGTERM, signal.SIGINT))])
def test_label_workers_die_with_the_main_process(tmp_path, sig) -> None:
    proc = start(*small(tmp_path, tmp_path / "run", "data.n_uav=16", "data.train_scenes=6000",
                        "data.label_workers=2"), cwd=tmp_path)
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
    process is refused the directory; afterwards a changed model and seed are refused, a torn history
    line and a stale temp file are cleaned up, and the resumed run equals an uninterrupted one. (A fresh run into
    the directory is refused: test_a_fresh_run_refuses_a_directory_holding_a_run.)"""
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
    history = (run / "metrics.jsonl").read_bytes()
    changed = run_cli(*small(tmp_path, run, *base, *steps, "resume=auto", "model.dropout=0.1", "seed=5"),
                      cwd=tmp_path, check=False)
    line = one_error_line(changed, "would break exact resumption")
    assert changed.returncode == 2 and "model.dropout: 0.0 -> 0.1" in line and "seed: 0 -> 5" in line
    assert (run / "metrics.jsonl").read_bytes() == history  # a refused resume changes nothing

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
        cfg.data.update(n_uav=6, train_scenes=32, val_scenes=8, test_scenes=8, cache_dir=str(tmp_path / "cache"),
                        label_workers=1)
        cfg.train.update(steps=30, eval_every=10, ckpt_every=5, log_every=5, warmup_steps=1)
        cfg.hardware.batch_size = 8
    return cfg


def blow_up_weights(monkeypatch, from_call: int, once: bool) -> None:
    """From the ``from_call``-th training step on (just once, or every step), multiply every weight by 1e6
    before the loss: the blown-up update that a too-high learning rate produces."""
    real = imitation.batch_imitation_loss
    calls = {"n": 0, "fired": False}

    def loss(runner, batch, k):
        calls["n"] += 1
        if calls["n"] >= from_call and not (once and calls["fired"]):
            calls["fired"] = True
            with torch.no_grad():
                for p in runner.parameters():
                    p.mul_(1e6)
        return real(runner, batch, k)

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
    model, _, _ = load_model(out / "best.pt")
    assert weights_norm(model) < 1e3


# ---------------------------------------------------------------- caches

SPEC, SETTINGS = SplitSpec("train", 6, 12, 7), BuildSettings(k_max=8, uav_neighbours=3, label_time_limit=5.0)


@pytest.mark.parametrize("manifest, reason", [
    ([], "manifest of the wrong shape"),
    ({"files": []}, "manifest of the wrong shape"),
    ({"files": {"graphs.pt": {"sha256": "00"}}}, "lacks the size and checksum"),
    ({"files": {"graphs.pt": {"bytes": "12", "sha256": "00"}}}, "lacks the size and checksum"),
    ("not json", "unreadable manifest"),
])
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
    proc = run_cli("mode=cache", "action=verify", f"data.cache_dir={tmp_path / 'cache'}",
                   f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path, check=False)
    assert proc.returncode == 1 and "DAMAGED: manifest of the wrong shape" in proc.stdout
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------- read-only and full disks (real mounts)

def namespace(script: str) -> subprocess.CompletedProcess[str]:
    """Run a shell script in a private user + mount namespace (no root needed where the kernel allows
    unprivileged user namespaces): its tmpfs and read-only mounts vanish with it."""
    proc = subprocess.run(["unshare", "--map-root-user", "--mount", "sh", "-c", script], capture_output=True,
                          text=True, timeout=600)
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
    proc = namespace(f"mount -t tmpfs -o size=160k tmpfs {full} && mount -t tmpfs -o size=16k tmpfs {tiny} && "
                     f"cd {tmp_path} && {run_on_full}; echo EXIT=$?; echo LS; ls -A {full / 'run'}; echo END; "
                     f"{cache_on_full}; echo EXIT=$?; echo LS; ls -A {tiny}; echo END")
    assert proc.stdout.count("EXIT=2") == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"cannot write {full / 'run' / 'last.pt'}: No space left on device" in proc.stderr
    assert f"cannot write {tiny}/train-n6-" in proc.stderr
    listed_run, listed_cache = [block.split("END")[0].split() for block in proc.stdout.split("\nLS\n")[1:]]
    assert "metrics.jsonl" in listed_run  # the history written so far is kept ...
    assert not [name for name in listed_run if name.endswith(".tmp") or name == "last.pt"]  # ... no partial file
    assert not [name for name in listed_cache if not name.endswith(".lock")]  # no half-built cache


# ---------------------------------------------------------------- run directories and resumption (units)

def test_a_fresh_run_refuses_a_directory_holding_a_run(tmp_path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 5}\n')
    with pytest.raises(RunDirectoryError, match="already holds a run .*resume=auto"):
        resume_checkpoint("false", tmp_path)
    assert resume_checkpoint("auto", tmp_path) is None  # no checkpoint: auto starts afresh
    with pytest.raises(ConfigError, match="resume=true but .* has no last.pt"):
        resume_checkpoint("true", tmp_path)


def test_resume_config_changes_are_sorted_into_safe_and_refused() -> None:
    stored = {"seed": 0, "model": {"hidden": 32, "dropout": 0.0}, "train": {"steps": 100, "lr": 0.003},
              "logger": {"name": "wandb"}, "hardware": {"batch_size": 8, "num_workers": 0}}
    new = {"seed": 0, "model": {"hidden": 32, "dropout": 0.0}, "train": {"steps": 200, "lr": 0.003},
           "logger": {"name": "jsonl"}, "hardware": {"batch_size": 16, "num_workers": 2}}
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
    with pytest.raises(ValueError, match="line 1 is not JSON"):
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


def out_of_range(key: str, kind: type) -> list:
    valid = RANGES[key]
    bad = []
    if math.isfinite(valid.low):
        bad.append(valid.low if valid.low_open else valid.low - 1)
    if math.isfinite(valid.high):
        bad.append(valid.high if valid.high_open else valid.high + 1)
    if kind is float:
        bad += [math.nan, math.inf, -math.inf]
    return [kind(v) if math.isfinite(v) else v for v in bad]


def test_every_numeric_key_has_a_valid_range() -> None:
    assert set(numeric_keys()) - HANDLED_ELSEWHERE == set(RANGES)


@pytest.mark.parametrize("key", sorted(RANGES))
def test_values_outside_each_range_are_rejected_naming_the_key(key) -> None:
    base = compose_cfg()
    validate(base)
    kind = numeric_keys()[key]
    is_list = isinstance(OmegaConf.select(base, key), ListConfig)
    for value in out_of_range(key, kind):
        cfg = copy.deepcopy(base)
        OmegaConf.update(cfg, key, [value] if is_list else value)
        with pytest.raises(ConfigError) as err:
            validate(cfg)
        assert str(err.value).startswith(f"{key}=") and str(RANGES[key]) in str(err.value)


@pytest.mark.parametrize("overrides, message", [
    (["task=file"], "task=file needs task.file=PATH"),
    (["train.lr=nan"], "train.lr=nan must be > 0"),
    (["train.grad_clip=-1"], "train.grad_clip=-1.0 must be > 0"),
    (["model.dropout=1.0"], "model.dropout=1.0 must be in [0, 1)"),
    (["data.source=generated"], "data.source=generated with algorithm=imitation: fresh scenes have no MILP labels"),
    (["data.source=generated", "algorithm=reinforce", "algorithm.imitation_weight=0.5"],
     "data.source=generated with algorithm.imitation_weight=0.5"),
    (["data.source=generated", "algorithm=reinforce", "task=file", "task.file=x.json"],
     "data.source=generated with task=file"),
    (["data.source=files"], "data.source='files' is not one of cache, generated"),
])
def test_named_bad_values_fail_before_any_work(overrides, message) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(compose_cfg(*overrides))


# ---------------------------------------------------------------- malformed scene files (generated fuzz)

def valid_scene() -> dict:
    return {"uav_position": [[0, 0], [3, 0], [0, 4]], "uav_range": [5.0, 5.0, 5.0],
            "target_position": [[3, 4], [1, 1]], "target_need": [2, 1], "target_value": [5.0, 1.0], "lam": 0.1}


FIELD_MUTATIONS = {  # each makes any field invalid, whatever its shape
    "deleted": None, "text": "abc", "boolean": True, "nested too deep": [[[1.0]]], "empty object": {},
    "nan": float("nan"), "negative infinity": float("-inf"), "beyond int64": 2**63, "overflowing": 1e308,
    "ragged": [[1, 2], [3]], "beyond every integer type": 10**400,
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
            path.write_text(json.dumps(raw) if name != "beyond every integer type" else
                            json.dumps(raw).replace('"__BIG__"', str(value)))
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
    np.savez(directory / "objects.npz", **{**{k: np.asarray(v) for k, v in valid_scene().items()},
                                           "lam": np.array([{"a": 1}], dtype=object)})
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
    for field, value, shown in (("uav_position", [[1e308, 0], [0, 0], [0, 0]], "1e+308"),
                                ("target_need", [2**63, 1], "9.22337e+18"), ("lam", 1e7, "1e+07")):
        path = tmp_path / f"{field}.json"
        path.write_text(json.dumps({**valid_scene(), field: value}))
        with pytest.raises(SceneFileError, match=re.escape(f"field '{field}' value {shown}") + ".*beyond the "
                                                                                               "supported"):
            load_scene(path)


# ---------------------------------------------------------------- evaluation against an unproven reference

def test_a_reference_not_proven_optimal_gives_no_gap(labelled_store) -> None:
    model = model_from_config(SimpleNamespace(hidden=32, heads=1, layers=1, dropout=0.0, ffn_mult=2))
    graph = GraphSettings(k_max=16, uav_neighbours=6)
    rows, _ = compare_on_split(model, labelled_store, "greedy", graph, 8, torch.device("cpu"), guided_keep=2)
    assert [r["method"].split(" ")[0] for r in rows] == ["model", "guided", "greedy", "lap", "mcf", "milp"]
    n = len(labelled_store)
    assert all(math.isfinite(r["optimality_gap"]) and r["reference_optimal"] == f"{n}/{n}" for r in rows)
    status = list(labelled_store.status)
    status[3] = "time_limit"
    unproven = dataclasses.replace(labelled_store, status=status)
    rows, _ = compare_on_split(model, unproven, "greedy", graph, 8, torch.device("cpu"), guided_keep=2)
    assert all(math.isnan(r["optimality_gap"]) and r["reference_optimal"] == f"{n - 1}/{n}" for r in rows)
    assert all(math.isfinite(r["reward"]) for r in rows)  # the rewards themselves are still reported
