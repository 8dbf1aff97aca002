"""A job its scheduler stops (SIGTERM, or the USR signal of a preemption or the time limit) is requeued and
resumes with no step lost or repeated: submitit's local executor, for real, against an uninterrupted run; and
``scontrol requeue`` (a SLURM job), a fake one on PATH, answering or hanging."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT, job_dirs, run_cli

from uavgnn.infrastructure.signals import EXIT_CODES
from uavgnn.runs import requeue
from uavgnn.runs.history import read_history
from uavgnn.runs.layout import REQUEUED

LONG = [
    "experiment=debug",
    "model=tiny",
    "data.n_uav=6",
    "data.train_scenes=64",
    "data.val_scenes=8",
    "data.test_scenes=8",
    "hardware.batch_size=16",
    "train.steps=400",
    "train.eval_every=200",
    "train.ckpt_every=200",
    "train.log_every=10",
    "hardware.threads=1",
    "logger=jsonl",
]


def job_tasks(sweep: Path) -> list[int]:
    """The processes of the sweep's submitit jobs (``python -m submitit.core._submit <sweep>/.submitit/<id>``)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"submitit.core._submit" in command and any(str(sweep).encode() in part for part in command):
            found.append(int(proc.name))
    return found


def train_steps(run: Path) -> list[int]:
    return [row["step"] for row in read_history(run) if "train/loss" in row]


@pytest.mark.heavy  # a submitit job started twice and an uninterrupted one: ~30 s each on 2 cores
@pytest.mark.parametrize("signum, tasks", [(signal.SIGTERM, 1), (signal.SIGUSR2, 1), (signal.SIGTERM, 2)])
def test_a_stopped_job_is_requeued_and_resumes_with_no_step_lost_or_repeated(tmp_path, signum, tasks) -> None:
    """``tasks`` = 2: the job is a 2-rank DDP run; the scheduler signals both ranks."""
    sweep, cache = tmp_path / "sweep", f"data.cache_dir={tmp_path / 'cache'}"
    launcher = ["-m", "hydra/launcher=submitit_local", f"hydra.launcher.tasks_per_node={tasks}"]
    sweeping = subprocess.Popen(
        [sys.executable, str(ROOT / "run.py"), *launcher, *LONG, cache, f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.time() + 240
    while not (list(sweep.glob("0-*")) and train_steps(job_dirs(sweep)[0])):  # training under way
        assert time.time() < deadline and sweeping.poll() is None, "the job never started training"
        time.sleep(0.02)
    running = job_tasks(sweep)
    assert len(running) == tasks
    for task in running:
        os.kill(task, signum)
    output = sweeping.communicate(timeout=300)[0]
    assert sweeping.returncode == 0, output[-3000:]
    (job,) = job_dirs(sweep)
    log = (job / "run.log").read_text()
    assert "requeued by the scheduler: the job resumes from step" in log and "resuming" in log, log[-2000:]
    resumed = [row for row in read_history(job) if row.get("event") == "resume"]
    assert len(resumed) == 1 and 0 < resumed[0]["step"] < 400  # stopped mid-training, resumed once
    assert train_steps(job) == list(range(10, 401, 10))  # every logged step once: none lost, none repeated
    assert not (job / "requeued.json").exists() and json.loads((job / "summary.json").read_text())["steps"] == 400

    run_cli(*launcher, *LONG, cache, f"hydra.sweep.dir={tmp_path / 'uninterrupted'}", cwd=tmp_path)
    requeued, straight = (
        torch.load(d / "last.pt", weights_only=True)["model"] for d in (job, job_dirs(tmp_path / "uninterrupted")[0])
    )
    for name, value in straight.items():  # the requeued job trained exactly what an uninterrupted run does
        torch.testing.assert_close(requeued[name], value, rtol=0, atol=0)


def fake_scontrol(directory: Path, body: str) -> None:
    """An ``scontrol`` executable in ``directory`` (put on PATH) running the shell ``body``."""
    script = directory / "scontrol"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)


def gone(pid: int) -> bool:
    """No such process, or one that has exited and only waits to be reaped by init (a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.fixture
def slurm_job(tmp_path, monkeypatch) -> Path:
    """A SLURM job (id 4242) whose PATH starts with ``tmp_path/bin``, where a test puts its ``scontrol``."""
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    (tmp_path / "run").mkdir()
    return tmp_path / "run"


def test_scontrol_requeues_the_slurm_job_and_the_record_stays_for_the_requeued_job(tmp_path, slurm_job) -> None:
    fake_scontrol(tmp_path / "bin", f'echo "$@" > {tmp_path / "args"}')
    requeue.requeue(slurm_job, 120, "SIGTERM", EXIT_CODES[signal.SIGTERM])
    assert (tmp_path / "args").read_text() == "requeue 4242\n"
    assert requeue.pending(slurm_job) == {"step": 120, "why": "SIGTERM"}


def test_a_hanging_scontrol_is_killed_with_what_it_started_well_before_slurm_kills_the_job(
    tmp_path, slurm_job, monkeypatch, caplog
) -> None:
    """A hanging ``scontrol`` must not hold the stop past SLURM's KillWait (30 s), nor be killed alone, orphaning
    what it started (as ``subprocess.run``'s timeout would, then wait on the orphan's pipes). It gets one wait of
    ``SCONTROL_TIMEOUT_S`` (1 s here), then its whole process group is killed and reaped before ``requeue``
    returns; the job is not requeued."""
    assert requeue.SCONTROL_TIMEOUT_S < 30  # under SLURM's default KillWait
    monkeypatch.setattr(requeue, "SCONTROL_TIMEOUT_S", 1.0)
    monkeypatch.setattr(requeue.log, "disabled", False)  # an earlier Hydra run in this worker may have disabled it
    monkeypatch.setattr(requeue.log, "propagate", True)
    fake_scontrol(
        tmp_path / "bin",
        f"echo $$ > {tmp_path / 'scontrol.pid'}\nsleep 300 &\necho $! > {tmp_path / 'child.pid'}\nsleep 300",
    )
    waits = []  # the timeout of each wait on scontrol
    real_communicate = subprocess.Popen.communicate

    def communicate(self, input=None, timeout=None):
        waits.append(timeout)
        return real_communicate(self, input, timeout)

    monkeypatch.setattr(subprocess.Popen, "communicate", communicate)
    requeue.requeue(slurm_job, 120, "SIGTERM", EXIT_CODES[signal.SIGTERM])
    # one wait, of the configured timeout, which expired (below); none after it that would drain the pipes the
    # orphan still held (subprocess.run's second communicate: how the stop used to hang)
    assert waits == [requeue.SCONTROL_TIMEOUT_S] == [1.0]
    assert not (slurm_job / REQUEUED).exists() and requeue.pending(slurm_job) is None
    assert "SLURM job 4242: scontrol requeue failed" in caplog.text and "timed out after 1.0 seconds" in caplog.text
    scontrol, child = (int((tmp_path / name).read_text()) for name in ("scontrol.pid", "child.pid"))
    with pytest.raises(ProcessLookupError):
        os.kill(scontrol, 0)  # the direct child: killed and reaped by requeue itself
    deadline = time.monotonic() + 5  # the orphaned child's reaping is init's
    while not gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(child), f"scontrol's child {child} outlived it"
