"""The suite's runs of the program (``conftest.run_cli``) fork from a Python that has imported it
(``tests/warm_program.py``): a run forked there must be the run a fresh ``python run.py`` makes."""

from __future__ import annotations

import pytest
from conftest import WarmProgram, run_cli


@pytest.mark.slow
@pytest.mark.parametrize("args", [("--help",), ("algorithm=mappo", "algorithm.teacher=oracle")])
def test_a_run_forked_from_the_warm_program_prints_and_exits_as_a_fresh_one(tmp_path, monkeypatch, args) -> None:
    warm = run_cli(*args, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path, check=False)
    assert WarmProgram.fits()
    monkeypatch.setenv("PYTHONHASHSEED", "1234")  # not the warm program's: a fresh interpreter
    assert not WarmProgram.fits()
    fresh = run_cli(*args, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path, check=False)
    assert (warm.returncode, warm.stdout, warm.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert warm.stdout or warm.stderr
