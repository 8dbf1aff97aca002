"""The history (``uavgnn.runs.history``, ``metrics.jsonl``): a torn last line is dropped and a torn middle is
damage; a resume's rewrite is atomic, so kill -9 or a full disk during it leaves the old history whole; a history
shorter than its checkpoint saw is refused, untouched."""

from __future__ import annotations

import hashlib
import json
import os
import time

import pytest
from conftest import cli, copy_run, namespace, one_error_line, run_cli, small, snapshot, start

from uavgnn.infrastructure.errors import RunDirectoryError
from uavgnn.runs.history import read_history


def test_a_torn_last_history_line_is_dropped_but_a_torn_middle_is_an_error(tmp_path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "a": 1}\n{"step": 2, "a"')
    assert read_history(tmp_path) == [{"step": 1, "a": 1}]
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "a"\n{"step": 2}\n')
    with pytest.raises(RunDirectoryError, match="damaged: line 1 is not a JSON object"):
        read_history(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n5\n')  # valid JSON, but not a row
    with pytest.raises(RunDirectoryError, match="damaged: line 2 is not a JSON object"):
        read_history(tmp_path)


@pytest.mark.heavy  # the suite's time: pytest -m heavy tests/runs/test_history.py
def test_kill_9_during_the_history_rewrite_leaves_the_old_or_the_new_history(tmp_path, finished_run) -> None:
    """kill -9 while resume rewrites a long history (600,000 rows) must not leave part of it: the rewrite is
    written beside the file, flushed and renamed: killed while the new file is being written, the history is whole."""
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
