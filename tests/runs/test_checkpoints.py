"""Checkpoint files are read safely (``uavgnn.runs.checkpoints``): one that would run code when unpickled is
refused on every path that loads one, before any of it runs; truncated, text and foreign files are one line; every
part of ``last.pt`` is checked against its checksum and for consistent content; and a checkpoint of another kind
names its kind and what takes it."""

from __future__ import annotations

import math
import re
import shutil
import struct
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import MASAC_SMALL, SMALL, compose, copy_run, masac_cfg, one_error_line, run_cli, small, snapshot

from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.infrastructure.errors import CheckpointError
from uavgnn.modes.train import run_train
from uavgnn.runs.checkpoints import load_checkpoint, part_checksums


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
    else:  # refused before it wrote anything of its own: no run directory left
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
    """Every part of last.pt is verified, not trusted: a flipped byte in MASAC's replay must not load silently, a
    replay size or cursor beyond capacity must not be a traceback, a NaN in the environment state must not
    diverge and be blamed on the LR. Each is one line naming the part, the run directory left as it was."""
    run = tmp_path / "run"
    run_train(masac_cfg(tmp_path), run)
    args = [*MASAC_SMALL, f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={run}", "resume=auto"]
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


@pytest.mark.heavy  # the suite's time: pytest -m heavy tests/runs/test_checkpoints.py
def test_every_weight_load_names_the_checkpoints_kind_and_what_takes_it(tmp_path, finished_run) -> None:
    """A checkpoint of another kind (a dynamics model as REINFORCE's init_from) and weights or
    optimiser state that do not fit are one line naming the checkpoint's kind and what takes it, never a
    traceback or wrong advice; a failed resume appends no 'resume' event."""
    dyn = tmp_path / "dyn"
    cfg = compose(
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
        and "(algorithm=dynamics, model=tcn: a dynamics model; mode=eval takes it; resume=auto "
        "hydra.run.dir=<its run> trains it on): algorithm.init_from= takes an assignment "
        "policy (algorithm=imitation or reinforce)"
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
                compose(
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
