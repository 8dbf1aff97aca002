"""A signal during training (``uavgnn.training.stop``): SIGTERM or SIGINT stops the run at the end of a step with
``last.pt`` and one line saying how to resume, exit 143 or 130; the resumed run equals an uninterrupted one; a
SIGTERM to the whole process group (loader workers too) leaves no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, logged, one_error_line, run_cli, small, start, wait_for

from uavgnn.runs.history import read_history


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
    assert len(notice) == 1 and f"resume with: {sys.executable} {ROOT / 'run.py'}" in notice[0]  # as it ran
    assert f"hydra.run.dir={run}" in notice[0]
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


@pytest.mark.slow
def test_sigterm_to_the_process_group_leaves_no_worker_traceback(tmp_path) -> None:
    """A SIGTERM to the process group (scancel, kill -- -pgid) also kills the loader's workers, so the step under
    way cannot finish: the run stops at the last completed step, with last.pt, and no traceback."""
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
