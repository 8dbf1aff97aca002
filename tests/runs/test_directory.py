"""A run directory is written only once its run is accepted (``uavgnn.runs.directory``): a refused run leaves a
directory holding a run byte-identical, refuses a directory of the user's files, and removes only the directories
it created itself."""

from __future__ import annotations

import shutil

import pytest
from conftest import copy_run, one_error_line, run_cli, small, snapshot


@pytest.mark.slow
@pytest.mark.heavy  # ~65 s; the default suite keeps the in-process refusals (tests/program/test_cli.py) for time
def test_refused_runs_leave_the_run_directory_byte_identical(tmp_path, finished_run, hostile) -> None:
    """A fresh run into a run's directory, a refused resume, and the other modes pointed at it exit 2 and leave
    every file byte-identical: a rewritten .hydra/config.yaml and overrides.yaml would make mode=compare show
    the new config with the old metrics."""
    run = copy_run(finished_run, tmp_path)
    before = snapshot(run)
    attempts = {
        "fresh run": ["model=small"],
        "changed seed": ["resume=auto", "seed=3", "model.dropout=0.1"],
        "mode=eval": ["mode=eval", f"ckpt={run / 'best.pt'}"],
        "mode=solve": ["mode=solve", "solver=greedy"],
        "mode=compare": ["mode=compare", f"path=[{run},{run}]"],
    }
    lines = {}
    for what, extra in attempts.items():
        proc = run_cli(*small(tmp_path, run, "train.steps=10", *extra), cwd=tmp_path, check=False)
        lines[what] = one_error_line(proc, "error:")
        assert proc.returncode == 2 and lines[what], what
        assert snapshot(run) == before, what
    refused = lines["changed seed"]
    assert "would break exact resumption" in refused and "model.dropout: 0.0 -> 0.1" in refused
    assert "seed: 0 -> 3" in refused
    shutil.copy(hostile[0], run / "last.pt")  # a resume refused while loading its checkpoint
    before = snapshot(run)
    proc = run_cli(*small(tmp_path, run, "train.steps=10", "resume=auto"), cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "would run code" in one_error_line(proc, "error:")
    assert snapshot(run) == before and not hostile[1].exists()


@pytest.mark.slow
@pytest.mark.heavy  # ~20 s: left out of the default suite for time
def test_a_fresh_run_refuses_a_directory_of_user_files_and_tidies_only_what_it_made(tmp_path) -> None:
    """A directory holding anyone's files is not a run directory: refused before anything is written; a refused
    run removes the directories it created, never one the user made."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "results.csv").write_text("my,results")
    (mine / "notes.txt").write_text("mine")
    before = snapshot(mine)
    proc = run_cli(*small(tmp_path, mine), cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "already holds files (notes.txt, results.csv)" in one_error_line(proc, "error:")
    assert snapshot(mine) == before
    empty = tmp_path / "empty"
    empty.mkdir()
    created = tmp_path / "new" / "parent" / "run"
    for directory in (empty, created):
        proc = run_cli(*small(tmp_path, directory, "model.hidden=0"), cwd=tmp_path, check=False)
        assert proc.returncode == 2 and "model.hidden=0" in one_error_line(proc, "error:")
    assert empty.is_dir() and not list(empty.iterdir())  # the user's (empty) directory stays
    assert not (tmp_path / "new").exists()  # what the refused run created is gone, parents included
