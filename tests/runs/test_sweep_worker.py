"""A sweep's jobs (``uavgnn.runs.sweep_worker``): a sweep whose jobs refuse their directories fails naming them,
with a record beside each; a joblib sweep's workers die with its killed main process, each stopping at the end of a
step with ``last.pt``, and their runs resume."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, SMALL, living, logged, process_table, run_cli, snapshot, wait_for


@pytest.mark.slow
def test_a_sweep_whose_jobs_refuse_their_directories_fails_and_leaves_them_untouched(tmp_path, finished_run) -> None:
    """A sweep re-run into a sweep directory whose jobs hold runs refuses every job; it must not do so without a
    record and exit 0: the refusals are recorded beside the jobs and the sweep fails, naming them."""
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


@pytest.mark.heavy  # the suite's time: pytest -m heavy tests/runs/test_sweep_worker.py
def test_joblib_sweep_workers_die_with_a_killed_sweep_and_their_runs_resume(tmp_path) -> None:
    """After kill -9 of a joblib sweep its workers must not train on, holding their runs' locks (a resume would
    be refused 'in use by pid ...'): each stops at the end of a step with last.pt, and its run resumes."""
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
