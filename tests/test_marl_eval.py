"""First-class evaluation of environment policies: ``mode=eval`` on a real (small) MASAC checkpoint scores it on
fixed test episodes against the planner, nearest targets and random actions, with its table, pictures and
dashboard run; ``mode=compare`` over MARL runs. (A checkpoint of another kind: ``tests/test_faults.py``.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import job_dirs, run_cli
from wandb_records import media

from uavgnn.api import load_env_policy
from uavgnn.envs.policies import run_episodes
from uavgnn.envs.uav_env import make_env
from uavgnn.settings import env_settings, scene_distribution

MASAC = ["algorithm=masac", "env.n_envs=8", "env.val_episodes=8", "algorithm.learning_starts=16",
         "algorithm.buffer_size=512", "model.hidden=16", "algorithm.critic_hidden=16", "hardware.batch_size=32",
         "train.steps=20", "train.eval_every=10", "train.ckpt_every=10", "logger=jsonl"]


@pytest.mark.slow
def test_marl_runs_are_evaluated_and_compared(tmp_path) -> None:
    """A 2-seed MASAC sweep: mode=eval on one checkpoint, mode=compare over both runs."""
    sweep = tmp_path / "sweep"
    run_cli("-m", *MASAC, "seed=0,1", f"data.cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep}",
            cwd=tmp_path)
    check_eval(tmp_path, job_dirs(sweep)[0] / "best.pt")
    check_compare(tmp_path, sweep)


def check_eval(tmp_path: Path, ckpt: Path) -> None:
    """mode=eval scores the checkpoint on fixed test episodes, beside the references, with its files."""
    out = tmp_path / "eval"
    proc = run_cli("mode=eval", f"ckpt={ckpt}", "eval.episodes=16", "logger=wandb", f"hydra.run.dir={out}",
                   cwd=tmp_path)
    assert "Test episodes: 16 episodes of 4 UAVs, 25 steps" in proc.stdout
    report = json.loads((out / "eval.json").read_text())
    rows = {row["method"]: row for row in report["rows"]}
    assert list(rows) == ["masac", "scripted planner", "nearest target", "random"]
    assert rows["scripted planner"]["of_planner"] == pytest.approx(1.0)
    policy, config = load_env_policy(ckpt)
    env = make_env(env_settings(config), scene_distribution(config), 16, "cpu", report["seed"])
    env.generator.manual_seed(report["seed"])  # the test episodes, from their seed, played here
    scores = run_episodes(env, policy)
    assert rows["masac"]["return"] == pytest.approx(float(scores.episode_return.mean()), abs=1e-4)
    assert rows["masac"]["of_planner"] == pytest.approx(rows["masac"]["return"] / rows["scripted planner"]["return"],
                                                        abs=1e-3)
    assert rows["masac"]["return_per_uav"] == pytest.approx(rows["masac"]["return"] / 4, abs=1e-4)
    for picture in ("trajectories.png", "episode.gif"):
        assert (out / picture).stat().st_size > 0
    assert media(next(out.glob("wandb/offline-run-*/run-*.wandb"))) == {"eval/episodes": "table-file",
                                                                        "eval/trajectories": "image-file"}


def check_compare(tmp_path: Path, sweep: Path) -> None:
    """mode=compare shows the runs by MARL metrics, with mean, std and 95% interval over the seeds."""
    proc = run_cli("mode=compare", f"path={sweep}", cwd=tmp_path)
    assert "test/of_planner" in proc.stdout and "best_val_planner_gap" in proc.stdout
    frame = pd.read_csv(sweep / "comparison.csv")
    runs, mean = frame[frame["seed"] != "*"], frame[frame["seed"] == "*"].iloc[0]
    values = [json.loads((job / "summary.json").read_text())["test/of_planner"] for job in job_dirs(sweep)]
    assert sorted(runs["test/of_planner"]) == pytest.approx(sorted(values))
    assert mean["test/of_planner"] == pytest.approx(np.mean(values))  # mean, std and 95% interval over the seeds
    assert mean["test/of_planner_std"] == pytest.approx(np.std(values, ddof=1))
    assert mean["test/of_planner_ci95"] == pytest.approx(12.7062 * np.std(values, ddof=1) / np.sqrt(2), rel=1e-4)
    assert runs["test/return"].notna().all() and runs["env_steps_per_s"].notna().all()
    assert (sweep / "comparison.png").stat().st_size > 0
    assert r"test/of\_planner" in (sweep / "comparison.tex").read_text()
