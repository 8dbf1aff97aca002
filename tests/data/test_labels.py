"""MILP labels solved in worker processes (``uavgnn.data.labels``): the workers never outlive the run, whatever
signal ends it."""

from __future__ import annotations

import signal
import time

import pytest
from conftest import living, process_table, small, start, wait_for


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
