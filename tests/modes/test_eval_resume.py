"""An evaluation stopped mid-way loses nothing: each finished test set is kept as it finishes, the stop prints the
command that continues it, and that command, pasted into a shell, ends with the tables and pictures of an
uninterrupted run without scoring the kept sets again (assignment and environment policies alike)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import MASAC, one_error_line, run_cli, snapshot, start, wait_for

from uavgnn.runs.layout import PARTIAL

ASSIGNMENT_EVAL = [  # the shipped 16-UAV policy: 2 distributions x 2 sizes = 4 sets of 16 scenes
    "mode=eval",
    "ckpt=pretrained",
    "eval.scales=[8]",
    "eval.max_total_uavs=256",
    "data.test_scenes=16",
    "eval.shift_sets=[]",
    "eval.positions=[uniform,clustered]",
    "logger=none",
]


def kept_sets(run: Path) -> list[str]:
    return sorted(p.name for p in (run / PARTIAL).glob("*.json") if p.name != "identity.json")


def without_timings(value: object) -> object:
    """A report with every duration (``*_s``, a note of milliseconds) left out: what two runs of the same
    evaluation share."""
    if isinstance(value, dict):
        timing = {k for k, v in value.items() if k.endswith("_s") or (k == "note" and " ms " in str(v))}
        return {k: without_timings(v) for k, v in value.items() if k not in timing}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def stop_and_continue(tmp_path: Path, args: list[str], run: Path, stop_after: int) -> subprocess.CompletedProcess:
    """``args`` into ``run`` (a directory name with an accent, a space and an emoji), SIGTERM once ``stop_after``
    sets are kept; the printed command run as printed in a shell. Returns the continued run."""
    proc = start(*args, f"hydra.run.dir='{run}'", cwd=tmp_path)
    wait_for(lambda: len(kept_sets(run)) >= stop_after or proc.poll() is not None, f"{stop_after} sets kept")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    err = (tmp_path / "bg.err").read_text()
    assert proc.returncode == 143 and "Traceback" not in err, err[-3000:]
    notice = [line for line in err.splitlines() if "interrupted by SIGTERM" in line]
    kept = kept_sets(run)
    assert len(notice) == 1 and f"{len(kept)} finished test set" in notice[0], err[-3000:]
    command = notice[0].split("continue with: ", 1)[1]
    before = {name: (run / PARTIAL / name).stat().st_mtime_ns for name in kept}
    continued = subprocess.run(
        command, shell=True, executable="/bin/bash", cwd=tmp_path, capture_output=True, text=True
    )
    assert continued.returncode == 0, continued.stdout[-2000:] + continued.stderr[-3000:]
    assert f"; {len(kept)} finished before, kept)" in continued.stdout
    assert not (run / PARTIAL).exists()  # the results are written: the kept sets say nothing more
    assert len(kept) >= 1 and before  # it did stop mid-way, with sets kept
    return continued


@pytest.mark.slow
def test_an_assignment_evaluation_stopped_anywhere_continues_to_the_same_results(tmp_path) -> None:
    args = [*ASSIGNMENT_EVAL, f"data.cache_dir={tmp_path / 'cache'}"]
    straight = tmp_path / "straight"
    run_cli(*args, f"hydra.run.dir={straight}", cwd=tmp_path)
    run = tmp_path / "évaluation 🚁 1"
    # a random point: after 1 or 2 of the 4 sets, mid-way through the next (after 3, the last small set and the writing
    # could end before the signal lands: the evaluation would be complete, nothing left to continue)
    stop_after = random.Random().randint(1, 2)
    continued = stop_and_continue(tmp_path, args, run, stop_after)
    scored = [line for line in continued.stdout.splitlines() if line.startswith("  set ")]
    assert 1 <= len(scored) <= 4 - stop_after  # only the sets left are scored again
    for name in ("transfer.json", "eval.json"):
        ours, theirs = (json.loads((d / name).read_text()) for d in (run, straight))
        assert without_timings(ours) == without_timings(theirs)
    assert {p.name for p in run.glob("*.png")} == {p.name for p in straight.glob("*.png")}


@pytest.mark.slow
@pytest.mark.heavy  # the suite's time: pytest -m heavy tests/modes/test_eval_resume.py
def test_an_environment_policy_evaluation_stopped_midway_continues_to_the_same_results(tmp_path) -> None:
    run_cli(*MASAC, f"hydra.run.dir={tmp_path / 'train'}", cwd=tmp_path)
    args = ["mode=eval", f"ckpt={tmp_path / 'train' / 'best.pt'}", "eval.episodes=256", "logger=none"]
    straight = tmp_path / "straight"
    done = run_cli(*args, f"hydra.run.dir={straight}", cwd=tmp_path)
    assert "mode=eval: 6 test sets (6 at each of 1 size): about " in done.stdout  # said before any work
    run = tmp_path / "évaluation 🚁 2"
    stop_and_continue(tmp_path, args, run, 2)
    ours, theirs = (json.loads((d / "eval.json").read_text()) for d in (run, straight))
    assert without_timings(ours) == without_timings(theirs)
    for picture in ("trajectories.png", "episode.gif", "test_sets.png"):
        assert (run / picture).stat().st_size > 0


@pytest.mark.slow
@pytest.mark.heavy  # the suite's time: pytest -m heavy tests/modes/test_eval_resume.py
def test_an_unfinished_evaluation_is_not_continued_by_another_command(tmp_path) -> None:
    """The kept sets of one evaluation never end up in another's tables: a changed command is refused there, the
    directory left byte-identical; a finished evaluation's directory is refused as before."""
    run = tmp_path / "run"
    args = [*ASSIGNMENT_EVAL, f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={run}"]
    proc = start(*args, cwd=tmp_path)
    wait_for(lambda: len(kept_sets(run)) >= 1 or proc.poll() is not None, "a set kept")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    before = snapshot(run)
    other = run_cli(*args, "eval.decoder=sample", cwd=tmp_path, check=False)
    line = one_error_line(other, "error:")
    assert other.returncode == 2 and "holds an unfinished evaluation of another command" in line
    assert "eval.decoder: greedy -> sample" in line and snapshot(run) == before
    run_cli(*args, "hardware.threads=1", cwd=tmp_path)  # how fast it runs does not make another evaluation
    again = run_cli(*args, cwd=tmp_path, check=False)
    assert again.returncode == 2 and "writes its results into a directory of its own" in one_error_line(again, "error:")
