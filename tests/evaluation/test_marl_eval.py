"""First-class evaluation of environment policies: ``mode=eval`` on a real (small) MASAC checkpoint scores it on
fixed test episodes against the planner, nearest targets and random actions, with its table, pictures and
dashboard run; ``mode=compare`` over MARL runs. (A checkpoint of another kind: ``tests/runs/test_checkpoints.py``.)"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import MASAC, ROOT, job_dirs, run_cli
from wandb_records import media

from uavgnn.algorithms.env_policy import compare_checkpoints
from uavgnn.api import load_env_policy
from uavgnn.config.settings import env_settings, scene_distribution
from uavgnn.envs.policies import run_episodes
from uavgnn.envs.uav_env import make_env


@pytest.mark.slow
def test_marl_runs_are_evaluated_and_compared(tmp_path) -> None:
    """A 2-seed MASAC sweep: mode=eval on one checkpoint, mode=compare over both runs."""
    sweep = tmp_path / "sweep"
    run_cli("-m", *MASAC, "seed=0,1", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    check_eval(tmp_path, job_dirs(sweep)[0] / "best.pt")
    check_compare(tmp_path, sweep)


def check_eval(tmp_path: Path, ckpt: Path) -> None:
    """mode=eval scores the checkpoint on fixed test episodes, beside the references, with its files."""
    out = tmp_path / "eval"
    proc = run_cli(
        "mode=eval", f"ckpt={ckpt}", "eval.episodes=16", "logger=wandb", f"hydra.run.dir={out}", cwd=tmp_path
    )
    assert "Test episodes: 16 episodes of 4 UAVs, 25 steps" in proc.stdout
    report = json.loads((out / "eval.json").read_text())
    rows = {row["method"]: row for row in report["rows"] if row["test_set"] == "nominal"}
    assert list(rows) == ["masac", "scripted planner", "decentralised planner", "CBBA", "nearest target", "random"]
    assert {row["test_set"] for row in report["rows"]} == {"nominal", *report["test_sets"]}
    assert rows["scripted planner"]["of_planner"] == pytest.approx(1.0)
    policy, config = load_env_policy(ckpt)
    env = make_env(env_settings(config), scene_distribution(config), 16, "cpu", report["seed"])
    env.generator.manual_seed(report["seed"])  # the test episodes, from their seed, played here
    scores = run_episodes(env, policy)
    assert rows["masac"]["return"] == pytest.approx(float(scores.episode_return.mean()), abs=1e-4)
    assert rows["masac"]["of_planner"] == pytest.approx(
        rows["masac"]["return"] / rows["scripted planner"]["return"], abs=1e-3
    )
    assert rows["masac"]["return_per_uav"] == pytest.approx(rows["masac"]["return"] / 4, abs=1e-4)
    failures = dataclasses.replace(env_settings(config), **report["test_sets"]["failures"])  # a disrupted set
    env = make_env(failures, scene_distribution(config), 16, "cpu", report["seed"])
    env.generator.manual_seed(report["seed"])
    failed = next(r for r in report["rows"] if r["test_set"] == "failures" and r["method"] == "masac")
    assert failed["return"] == pytest.approx(float(run_episodes(env, policy).episode_return.mean()), abs=1e-4)
    for picture in ("trajectories.png", "episode.gif"):
        assert (out / picture).stat().st_size > 0
    assert media(next(out.glob("wandb/offline-run-*/run-*.wandb"))) == {
        "eval/episodes": "table-file",
        "eval/trajectories": "image-file",
        "eval/test_sets": "image-file",
    }


def check_compare(tmp_path: Path, sweep: Path) -> None:
    """mode=compare shows the runs by MARL metrics (shares in percent), with mean, std and a 95% interval over the
    seeds that stays inside the values (2 seeds: the bootstrap's [smaller, larger]); its MARL section is each
    run's own test table and the IQM with its stratified-bootstrap interval; compare_marl.py is the same path."""
    proc = run_cli("mode=compare", f"path={sweep}", cwd=tmp_path)
    out = " ".join(proc.stdout.split())
    assert "test return / planner's (%)" in out and "best val. gap to the planner (%)" in out
    assert "IQM over runs and tasks" in out
    frame = pd.read_csv(sweep / "comparison.csv")
    runs, mean = frame[frame["seed"] != "*"], frame[frame["seed"] == "*"].iloc[0]
    summaries = [json.loads((job / "summary.json").read_text()) for job in job_dirs(sweep)]
    values = [s["test/of_planner"] for s in summaries]
    assert sorted(runs["test/of_planner"]) == pytest.approx(sorted(values))  # the csv: as recorded
    assert mean["test/of_planner"] == pytest.approx(np.mean(values))
    assert mean["test/of_planner_std"] == pytest.approx(np.std(values, ddof=1))
    assert (mean["test/of_planner_ci_low"], mean["test/of_planner_ci_high"]) == pytest.approx(
        (min(values), max(values))
    )
    assert runs["test/return"].notna().all() and runs["env_steps_per_s"].notna().all()
    assert (sweep / "comparison.png").stat().st_size > 0
    assert r"planner's (\%) $\uparrow$" in (sweep / "comparison.tex").read_text()  # a header's second line

    # compare_marl.py once gave MAPPO a return of 0.069 where the run's own table said -0.039: it replayed
    # the checkpoints at 14 steps on 256 episodes by default, not the run's 25 steps on env.val_episodes=8
    script = importlib.util.spec_from_file_location("compare_marl", ROOT / "benchmarks" / "compare_marl.py")
    compare_marl = importlib.util.module_from_spec(script)
    script.loader.exec_module(compare_marl)
    _, rows, iqm_rows, data = compare_marl.own_tables([str(sweep)])
    keys = ("return", "return_std", "completion_rate", "collisions", "of_planner")
    for job, summary in zip(job_dirs(sweep), summaries):
        own = summary["test"]
        mine = next(row for row in rows if row.get("run") == job.name)
        assert {k: mine[k] for k in keys} == {k: own[0][k] for k in keys}  # equal, not close
        references = [row for row in rows if row.get("run") is None]
        assert [[r["method"], *(r[k] for k in keys)] for r in references] == [
            [r["method"], *(r[k] for k in keys)] for r in own[1:]
        ]
    assert json.loads((sweep / "marl_eval.json").read_text()) == json.loads(json.dumps(data))
    (masac,) = iqm_rows  # 2 runs: the IQM cuts none, the mean; the interval within the runs' values
    assert masac["algorithm"] == "masac" and masac["runs"] == 2 and masac["tasks"] == 1
    assert masac["test/of_planner"] == pytest.approx(np.mean(values))
    assert min(values) <= masac["test/of_planner_low"] <= masac["test/of_planner_high"] <= max(values)
    (task,) = data["uavgnn-default"].values()
    assert sorted(task["masac"]) == ["seed_0", "seed_1"]
    assert task["masac"]["seed_0"]["absolute_metrics"]["return"] == [summaries[0]["test"][0]["return"]]
    assert [step["step_count"] for step in task["masac"]["seed_0"].values() if "step_count" in step] == [10, 20]
    # replayed at the run's own horizon and episode count: the same numbers; the old defaults: others
    best = str(job_dirs(sweep)[0] / "best.pt")
    own = compare_checkpoints([best], 8, 25, torch.device("cpu"))[0]
    assert own["return"] == pytest.approx(summaries[0]["test"][0]["return"], abs=1e-4)
    assert compare_checkpoints([best], 256, 14, torch.device("cpu"))[0]["return"] != own["return"]
