"""A checkpoint written before the plug-in restructuring resumes, or is refused with one line saying why
(``tests/data/before_plugins``: how they were made)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from conftest import ROOT, run_cli

OLD = ROOT / "tests" / "data" / "before_plugins"
C = ["logger=jsonl", "train.ckpt_every=2", "train.eval_every=2", "train.log_every=2", "resume=auto"]
RUNS = {
    "imitation": ["experiment=debug", "model=tiny", "data.n_uav=6", "data.train_scenes=32", "data.val_scenes=8",
                  "data.test_scenes=8", "hardware.batch_size=8"],
    "masac": ["algorithm=masac", "hardware.batch_size=16", "algorithm.learning_starts=16", "algorithm.buffer_size=64",
              "env.n_envs=8", "env.val_episodes=8", "model.hidden=16", "algorithm.critic_hidden=16"],
    "coma": ["algorithm=coma", "hardware.batch_size=8", "algorithm.minibatches=2", "algorithm.data_passes=1",
             "env.val_episodes=8", "model.hidden=16", "algorithm.critic_hidden=16"],
}


def resume(name: str, tmp_path: Path):
    run = tmp_path / name
    run.mkdir()
    shutil.copy(OLD / name / "last.pt", run / "last.pt")
    proc = run_cli(*RUNS[name], *C, "train.steps=6", f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={run}",
                   cwd=tmp_path, check=False)
    return run, proc


@pytest.mark.slow
@pytest.mark.parametrize("name, optimisers", [("imitation", ["model"]),
                                              ("masac", ["critics", "actors", "temperatures"])])
def test_a_checkpoint_from_before_the_plug_ins_resumes(tmp_path, name, optimisers) -> None:
    """One optimiser with a parameter group per network becomes one per network, its moments kept: AdamW has
    counted the 4 old steps and the 2 new ones."""
    run, proc = resume(name, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed from" in proc.stderr + proc.stdout
    optimiser = torch.load(run / "last.pt", weights_only=True)["optimizer"]
    assert list(optimiser) == optimisers
    assert {float(p["step"]) for state in optimiser.values() for p in state["state"].values()} == {6.0}


@pytest.mark.slow
def test_an_on_policy_checkpoint_from_before_the_plug_ins_is_refused_in_one_line(tmp_path) -> None:
    run, proc = resume("coma", tmp_path)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(lines) == 1
    assert "saved before a collection recorded the step it started at" in lines[0]
    assert sorted(p.name for p in run.iterdir()) == ["last.pt"]  # the run directory as it was
