"""SIGTERM outside the training loop (``uavgnn.infrastructure.signals``): a run stuck in a long computation ends at
a second signal, a test phase or the dynamics rollouts stopped by one say so in one line, and the same command can
be run again afterwards."""

from __future__ import annotations

import signal
import time

import pytest
from conftest import run_cli, small, start, wait_for

from uavgnn.runs.layout import ASSIGNMENT, SOLVE_METRICS


@pytest.mark.slow
def test_a_second_sigterm_ends_a_run_stuck_in_a_long_computation_at_once(tmp_path) -> None:
    """Python runs a SIGTERM handler only between bytecodes, so a run inside a long MILP solve would ignore SIGTERM
    until the solver returned. A second signal ends it at once, saying so: not the first signal's grace period,
    and not the solver's return (no results written)."""
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
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)  # a hang guard
    err = (tmp_path / "bg.err").read_text()
    assert proc.returncode == 143 and "Traceback" not in err, err[-2000:]
    # ended by the second signal: not by the first one's grace period (it would say "still busy"), nor after the
    # solver returned (it would have written its results and said where)
    ended = [line for line in err.splitlines() if line.startswith("interrupted by")]
    assert ended == ["interrupted by SIGTERM (a second signal): exiting now; nothing already written is lost"], err
    assert not (tmp_path / "run" / ASSIGNMENT).exists() and not (tmp_path / "run" / SOLVE_METRICS).exists()
    assert "results in" not in (tmp_path / "bg.out").read_text()


@pytest.mark.heavy  # the suite's time: pytest -m heavy tests/infrastructure/test_signals.py
def test_sigterm_in_the_test_phase_or_rollouts_is_one_line_and_the_command_can_be_repeated(tmp_path) -> None:
    """SIGTERM during a test phase or the dynamics rollouts must say so in one line, not exit 143 silently; and
    stopped in the rollouts, the run must leave no empty metrics.jsonl that would make the same command refused."""
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
