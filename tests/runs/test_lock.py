"""One live process per run directory (``uavgnn.runs.lock``): the lock is the holding process's own, so when it
dies the directory is free, even while a child it forked lives on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from conftest import ROOT, living, run_cli, small


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
