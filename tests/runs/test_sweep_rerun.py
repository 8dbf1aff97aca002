"""Kill a sweep anywhere, re-issue the same command, get the same tables.

The command is the same every time (``hydra.sweep.dir=<name> resume=auto``): finished jobs are skipped (their
summary and score kept), unfinished ones continue from ``last.pt``, one stopped before its first checkpoint
starts again, and records of failures it has since superseded are cleared, so the sweep exits 0.
"""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, SMALL, copy_run, job_dirs, run_cli, wait_for

TIMED = (
    "time",
    "per_s",
    "_ms",
    "wait",
    "peak_mem",
    "_s",
    "wall",
    "duration",
    "manifest",
    "note",
)  # what differs between two runs anyway


def untimed(value: object) -> object:
    """``value`` (a summary, a row, a list of them) without the figures that timing changes."""
    if isinstance(value, dict):
        return {key: untimed(item) for key, item in value.items() if not any(t in key for t in TIMED)}
    if isinstance(value, list):
        return [untimed(item) for item in value]
    return value


def sweep_command(tmp_path: Path, sweep: Path, *extra: str) -> list[str]:
    return [
        "-m",
        *SMALL,
        f"data.cache_dir={tmp_path / 'cache'}",
        "hardware.threads=1",
        f"hydra.sweep.dir={sweep}",
        "resume=auto",
        *extra,
    ]


def results(sweep: Path) -> dict[str, object]:
    """Each job's summary and history without what timing changes: what a re-issued sweep must reproduce."""
    found = {}
    for job in job_dirs(sweep):
        found[job.name] = untimed(json.loads((job / "summary.json").read_text()))
        history = [json.loads(line) for line in (job / "metrics.jsonl").open()]
        found[job.name + "/history"] = untimed([row for row in history if "event" not in row])  # resume events kept
    return found


def compared(sweep: Path, tmp_path: Path) -> list[dict[str, str]]:
    """``mode=compare``'s table of the sweep, quality columns only."""
    run_cli("mode=compare", f"path={sweep}", "logger=none", cwd=tmp_path)
    with (sweep / "comparison.csv").open() as f:
        return untimed(list(csv.DictReader(f)))


@pytest.mark.slow
@pytest.mark.heavy  # ~28 s: left out of the default suite for time (the sweep re-run drills: pytest -m heavy)
def test_a_refused_sweep_then_the_same_command_with_resume_auto_finishes_with_exit_0(tmp_path) -> None:
    """A sweep re-run without resume=auto is refused per job (failed-<job>.json); re-run with resume=auto it must
    not go on printing "1 of 2 jobs failed ... already holds a run" and exiting 1 once every job is finished: the
    finished jobs are found finished, their stale records cleared, exit 0."""
    sweep = tmp_path / "sweep"
    command = sweep_command(tmp_path, sweep, "seed=0,1", "train.steps=4", "train.eval_every=2")
    command.remove("resume=auto")
    run_cli(*command, cwd=tmp_path)
    refused = run_cli(*command, cwd=tmp_path, check=False)
    assert refused.returncode == 1 and "2 of 2 jobs failed" in refused.stderr
    assert len(list(sweep.glob("failed-*.json"))) == 2
    before = {job.name: (job / "summary.json").read_bytes() for job in job_dirs(sweep)}
    for _ in range(2):  # and on every later re-run
        again = run_cli(*command, "resume=auto", cwd=tmp_path, check=False)
        assert again.returncode == 0, again.stderr
        assert "failed" not in again.stderr and again.stdout.count("not run again") == 2
        assert list(sweep.glob("failed-*.json")) == []
        assert {job.name: (job / "summary.json").read_bytes() for job in job_dirs(sweep)} == before


@pytest.mark.slow
def test_a_run_stopped_before_its_first_checkpoint_starts_again_and_finishes_as_an_uninterrupted_one(
    tmp_path, finished_run
) -> None:
    """A job killed before its first ``last.pt`` left its history, wandb id and failure record: resume=auto
    refused it ("already holds files"), so the sweep could never finish. Now it starts again, keeping its wandb
    id, and ends with the uninterrupted run's results."""
    run = copy_run(finished_run, tmp_path)
    for name in ("last.pt", "best.pt", "summary.json", "test_scene.png"):
        (run / name).unlink(missing_ok=True)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join(lines[:2]) + "\n")  # what was written before the kill
    (run / ".wandb_run_id").write_text("abcd1234")
    (run / "failed.json").write_text('{"error": "Interrupted"}')
    run_cli(
        *SMALL,
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={run}",
        "train.steps=10",
        "train.ckpt_every=5",
        "train.eval_every=5",
        "resume=auto",
        cwd=tmp_path,
    )
    assert (run / ".wandb_run_id").read_text() == "abcd1234" and not (run / "failed.json").exists()
    original = untimed(json.loads((finished_run / "run" / "summary.json").read_text()))
    again = untimed(json.loads((run / "summary.json").read_text()))
    assert again == original and again["steps"] == 10 and len(again["final_val"]) > 3


def start_sweep(command: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    """The sweep in a session of its own, so the test can wait for every process it started to end."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / "run.py"), *command],
        cwd=cwd,
        stdout=log.open("a"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def workers_of(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found]


def wait_for_session_end(session: int, timeout: float = 120.0) -> None:
    """Every process of the sweep's session gone (workers finish their step and write last.pt first)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.killpg(session, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(session, signal.SIGKILL)
    raise AssertionError("the killed sweep's processes did not end")


@pytest.mark.heavy
def test_a_sweep_killed_anywhere_a_few_times_then_re_issued_ends_with_an_uninterrupted_sweeps_tables(tmp_path) -> None:
    """The kill-anywhere drill: a joblib sweep of three jobs, two at a time, killed at random moments (the
    parent or a worker, SIGTERM or kill -9) four times in a row, each time re-issued with the same command;
    the fifth run finishes. Its exit is 0, no failure record is left, and every job's results and the
    comparison table equal those of the same sweep run once without interruption."""
    command = [
        "hydra/launcher=joblib",
        "hardware.sweep_jobs=2",
        "seed=0,1,2",
        "train.steps=60",
        "train.ckpt_every=10",
        "train.eval_every=20",
    ]
    straight = tmp_path / "straight"
    run_cli(*sweep_command(tmp_path, straight, *command), cwd=tmp_path)
    killed, log = tmp_path / "killed", tmp_path / "killed.log"
    rng = random.Random(62)
    kills = [
        ("worker", signal.SIGKILL),
        ("parent", signal.SIGTERM),
        ("worker", signal.SIGTERM),
        ("parent", signal.SIGKILL),
    ]
    for attempt, (target, signum) in enumerate(kills):
        proc = start_sweep(sweep_command(tmp_path, killed, *command), tmp_path, log)
        deadline = time.time() + 60
        while not workers_of(proc.pid) and time.time() < deadline:  # the launcher's workers have started
            time.sleep(0.1)
        time.sleep(rng.uniform(1.0, 10.0))
        workers = [pid for pid in workers_of(proc.pid) if b"LokyProcess" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        victim = rng.choice(workers) if target == "worker" and workers else proc.pid
        with log.open("a") as f:
            f.write(f"\n=== attempt {attempt}: {signum.name} to {'a worker' if victim != proc.pid else 'the parent'}\n")
        os.kill(victim, signum)
        proc.wait(timeout=300)
        wait_for_session_end(proc.pid)
    final = run_cli(*sweep_command(tmp_path, killed, *command), cwd=tmp_path, check=False)
    assert final.returncode == 0, f"{final.stderr}\n{log.read_text()[-4000:]}"
    assert list(killed.glob("failed-*.json")) == [] and list(killed.glob("*/failed.json")) == []
    assert results(killed) == results(straight)
    assert compared(killed, tmp_path) == compared(straight, tmp_path)


@pytest.mark.heavy  # the suite's time (20 s): pytest -m heavy tests/runs/test_sweep_rerun.py
def test_masac_resumed_after_a_stop_in_its_test_phase_reports_its_final_validation(tmp_path) -> None:
    """SIGTERM in MASAC's test phase, then the resume: its summary.json must hold the final validation (an empty
    ``final_val`` where the uninterrupted run's has 7 keys would be a lost result). A stop there leaves ``last.pt``
    at the last step and no summary; the resumed run trains no step, and reports the validation its checkpoint
    saved."""
    run = tmp_path / "run"
    masac = [
        "algorithm=masac",
        "model=mlp",
        "model.hidden=16",
        "env.n_envs=8",
        "algorithm.learning_starts=16",
        "algorithm.buffer_size=256",
        "hardware.batch_size=16",
        "train.steps=10",
        "train.eval_every=10",
        "train.ckpt_every=10",
        "algorithm.critic_hidden=16",
        "env.val_episodes=8",
        "logger=jsonl",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={run}",
        "resume=auto",
    ]
    run_cli(*masac, cwd=tmp_path)
    straight = json.loads((run / "summary.json").read_text())
    (run / "summary.json").unlink()  # what a stop in the test phase leaves: last.pt at step 10, no summary
    run_cli(*masac, cwd=tmp_path)
    resumed = json.loads((run / "summary.json").read_text())
    assert len(straight["final_val"]) >= 7 and resumed["final_val"] == straight["final_val"]


@pytest.mark.heavy
def test_an_optuna_search_re_issued_skips_its_finished_trials_and_takes_the_same_path(tmp_path) -> None:
    """The sweeper gets each finished trial's stored score back: the seeded search proposes the same trials,
    their folders are found finished, and the best value and parameters are the same."""
    sweep = tmp_path / "search"
    command = sweep_command(tmp_path, sweep, "hparams_search=optuna", "hydra.sweeper.n_trials=3", "train.steps=10")
    run_cli(*command, cwd=tmp_path)
    first = (sweep / "optimization_results.yaml").read_text()
    names = [job.name for job in job_dirs(sweep)]
    again = run_cli(*command, cwd=tmp_path)
    assert again.stdout.count("not run again") == 3 and [job.name for job in job_dirs(sweep)] == names
    assert (sweep / "optimization_results.yaml").read_text() == first


def living(pids: list[int]) -> list[int]:
    return [pid for pid in pids if Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


@pytest.mark.slow
@pytest.mark.heavy  # the suite's time: pytest -m heavy tests/runs/test_sweep_rerun.py
def test_a_sweep_killed_while_its_jobs_start_and_re_issued_at_once_ends_as_an_uninterrupted_one(tmp_path) -> None:
    """kill -9 of a joblib sweep's main process while its workers are still starting (importing): they notice
    within a few seconds and stop; the same command re-issued at once (no waiting for them) exits 0 with the
    tables of an uninterrupted sweep."""
    command = ["hydra/launcher=joblib", "hardware.sweep_jobs=2", "seed=0,1", "train.steps=20", "train.eval_every=10"]
    straight = tmp_path / "straight"
    run_cli(*sweep_command(tmp_path, straight, *command), cwd=tmp_path)
    killed, log = tmp_path / "killed", tmp_path / "killed.log"
    proc = start_sweep(sweep_command(tmp_path, killed, *command), tmp_path, log)
    deadline = time.time() + 120
    while time.time() < deadline and not [p for p in workers_of(proc.pid) if b"Loky" in _cmdline(p)]:
        time.sleep(0.02)
    workers = [p for p in workers_of(proc.pid) if b"Loky" in _cmdline(p)]
    started = [job for job in killed.glob("*") if (job / "run.log").exists()]
    assert workers and not started  # killed during the jobs' start-up
    proc.kill()
    proc.wait(timeout=30)
    stopped_at = time.time()
    again = run_cli(*sweep_command(tmp_path, killed, *command), cwd=tmp_path, check=False)  # at once
    assert again.returncode == 0, f"{again.stdout[-2000:]}\n{again.stderr[-3000:]}\n{log.read_text()[-3000:]}"
    assert "in use by" not in again.stderr
    wait_for_session_end(proc.pid, timeout=10)  # the old workers are gone too
    assert time.time() - stopped_at < 300
    assert results(killed) == results(straight)
    assert compared(killed, tmp_path) == compared(straight, tmp_path)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.slow
@pytest.mark.heavy  # the suite's time: pytest -m heavy tests/runs/test_sweep_rerun.py
def test_a_workers_signal_is_one_line_with_the_command_that_continues_the_sweep(tmp_path) -> None:
    """SIGTERM to one of a joblib sweep's workers mid-job: its job stops with last.pt; the sweep's main process
    says so in one line (not loky's 40-line TerminatedWorkerError) with the command that continues the sweep,
    and that command, pasted into a shell, finishes it."""
    sweep, log = tmp_path / "sweep", tmp_path / "sweep.log"
    command = ["hydra/launcher=joblib", "hardware.sweep_jobs=2", "seed=0,1", "train.steps=300", "train.ckpt_every=10"]
    proc = start_sweep(sweep_command(tmp_path, sweep, *command), tmp_path, log)
    wait_for(lambda: all((sweep / job / "last.pt").exists() for job in ("0-seed:0", "1-seed:1")), "both jobs' last.pt")
    (victim,) = [p for p in workers_of(proc.pid) if b"Loky" in _cmdline(p) and _runs_a_job(p, sweep)][:1]
    os.kill(victim, signal.SIGTERM)
    proc.wait(timeout=120)
    wait_for_session_end(proc.pid)
    said = log.read_text()
    assert proc.returncode == 143 and "Traceback" not in said, said[-4000:]
    (line,) = [line for line in said.splitlines() if line.startswith("sweep stopped: ")]
    continued = line.split("continue it with: ", 1)[1]
    assert "-m" in continued.split() and f"hydra.sweep.dir={sweep}" in continued and "resume=auto" in continued
    pasted = subprocess.run(
        continued, shell=True, executable="/bin/bash", cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert pasted.returncode == 0, pasted.stderr[-3000:]
    assert all((job / "summary.json").exists() for job in job_dirs(sweep))


def _runs_a_job(pid: int, sweep: Path) -> bool:
    """Whether worker ``pid`` holds the lock of one of the sweep's jobs."""
    return any(f"pid {pid} on" in (job / ".uavgnn.lock").read_text() for job in job_dirs(sweep))
