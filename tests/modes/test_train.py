"""The main job end to end: resume after a kill, seeding, NaN handling, wandb offline, multirun."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT, SMALL_RUN, job_dirs, run_cli
from omegaconf import OmegaConf
from wandb_records import history, media, run_record, summary


def overrides(tmp_path: Path, run: str, *extra: str) -> list[str]:
    return [*SMALL_RUN, f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / run}", *extra]


def params(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "last.pt", weights_only=False)["model"]


def steps_logged(run_dir: Path, key: str) -> list[int]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if key in r]


@pytest.mark.heavy  # the suite's time; kill -9 and resume also in the kill-anywhere drill (heavy)
def test_resume_after_kill_matches_an_uninterrupted_run(tmp_path) -> None:
    long = ["train.steps=120", "train.ckpt_every=20", "train.eval_every=40", "logger=jsonl"]
    run_cli(*overrides(tmp_path, "straight", *long), cwd=tmp_path)  # also builds the cache
    cmd = [sys.executable, str(ROOT / "run.py"), *overrides(tmp_path, "killed", *long)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last = tmp_path / "killed" / "last.pt"
    deadline = time.time() + 300
    while not last.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)  # let it run past the checkpoint: those steps must be redone, not duplicated
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    interrupted_at = torch.load(last, weights_only=False)["state"]["step"]
    assert interrupted_at < 120, "the run finished before it could be interrupted"
    run_cli(*overrides(tmp_path, "killed", *long, "resume=auto"), cwd=tmp_path)
    straight, resumed = params(tmp_path / "straight"), params(tmp_path / "killed")
    for name in straight:
        torch.testing.assert_close(resumed[name], straight[name], rtol=0, atol=0)
    logged = steps_logged(tmp_path / "killed", "train/loss")
    assert logged == steps_logged(tmp_path / "straight", "train/loss") == list(range(5, 121, 5))


@pytest.mark.slow
def test_diverging_loss_stops_with_a_clear_message(tmp_path) -> None:
    proc = run_cli(
        *overrides(tmp_path, "nan", "logger=jsonl", "train.lr=1e30", "train.grad_clip=1e30", "train.warmup_steps=1"),
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2
    # read at the log points (every 5 steps): at least train.max_bad_steps=5 in a row by then
    diverged = re.search(r"training diverged: (\d+) non-finite losses in a row before step (\d+)", proc.stderr)
    assert diverged and 5 <= int(diverged[1]) <= int(diverged[2]), proc.stderr
    assert "Traceback" not in proc.stderr
    # the loss explodes within the first steps, before the first checkpoint (ckpt_every=10)
    assert "no checkpoint was written yet" in proc.stderr and not (tmp_path / "nan" / "last.pt").exists()


@pytest.mark.slow
def test_wandb_offline_run_holds_the_history(tmp_path) -> None:
    proc = run_cli(*overrides(tmp_path, "wb", "logger=wandb"), cwd=tmp_path)
    files = list((tmp_path / "wb" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1, proc.stderr
    rows = history(files[0])
    losses = [r["train/loss"] for r in rows if "train/loss" in r]
    jsonl = [json.loads(line) for line in (tmp_path / "wb" / "metrics.jsonl").read_text().splitlines()]
    assert losses == pytest.approx([r["train/loss"] for r in jsonl if "train/loss" in r])
    assert any("val/optimality_gap" in r for r in rows) and any(r.get("model/params", 0) > 0 for r in rows)
    run = run_record(files[0])
    assert run.config.update  # the full resolved config was passed to wandb.init
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["manifest"]["git"] == json.loads((tmp_path / "wb" / "summary.json").read_text())["manifest"]["git"]
    assert config["manifest"]["packages"]["wandb"] and config["manifest"]["command"].endswith("logger=wandb")
    final = summary(files[0])
    result = json.loads((tmp_path / "wb" / "summary.json").read_text())
    assert final["best/val/optimality_gap"] == pytest.approx(result["best_val_optimality_gap"])
    assert final["test/optimality_gap"] == pytest.approx(result["test/optimality_gap"])
    assert final["perf/graphs_per_s"] > 0 and final["perf/peak_mem_mb"] > 0
    assert run.run_id == (tmp_path / "wb" / ".wandb_run_id").read_text()  # kept by the run, not its folder name
    # the test comparison as a table, the picture as an image
    assert media(files[0]) == {"test/methods": "table-file", "test/scene": "image-file"}
    assert list((files[0].parent / "files" / "media" / "table" / "test").glob("methods_*.table.json"))
    # wandb's own local viewer reads it, no account or upload (docs/comparing-runs.md#wandb)
    leet = subprocess.run(
        [
            str(Path(sys.executable).parent / "wandb"),
            "leet",
            "inspect",
            "--summary",
            "--json",
            str(tmp_path / "wb" / "wandb"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    shown = json.loads(leet.stdout)
    assert shown["state"] == "finished" and shown["run_id"] == run.run_id, leet.stderr[-2000:]
    assert shown["summary"]["test/optimality_gap"] == pytest.approx(result["test/optimality_gap"])


@pytest.mark.slow
def test_a_sweep_job_folder_is_named_by_what_the_sweep_varies_and_pastes_as_an_override(tmp_path) -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from uavgnn.runs.directory import JOB_DIR_CHARS, job_dir_name

    OmegaConf.save(
        {"hydra": {"overrides": {"task": ["model=tiny,small", "seed=0,1", "logger=jsonl"]}}}, tmp_path / "multirun.yaml"
    )
    assert job_dir_name(3, str(tmp_path), "logger=jsonl,model=small,seed=1") == "3-model:small+seed:1"
    # a search that varies nothing by itself (Optuna): every override, in characters an override takes unquoted
    name = job_dir_name(0, str(tmp_path / "elsewhere"), "model.hidden=[1,2],task.file=/a b/x.json")
    assert name == "0-model.hidden:_1_2_+task.file:_a_b_x.json"
    assert OverridesParser.create().parse_override(f"hydra.run.dir=/tmp/{name}").value() == f"/tmp/{name}"
    assert len(job_dir_name(1, str(tmp_path), ",".join(f"k{i}=v{i}" for i in range(99)))) == JOB_DIR_CHARS


def test_multirun_basic_launcher_groups_wandb_runs(tmp_path) -> None:
    sweep = tmp_path / "sweep"
    run_cli(
        "-m",
        *SMALL_RUN,
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.sweep.dir={sweep}",
        "model=tiny,small",
        "optim.amp=true,false",
        "logger=wandb",
        cwd=tmp_path,
    )
    jobs = job_dirs(sweep)
    assert [job.name for job in jobs] == [
        "0-model:tiny+optim.amp:True",
        "1-model:tiny+optim.amp:False",
        "2-model:small+optim.amp:True",
        "3-model:small+optim.amp:False",
    ]
    groups, tags, names = set(), [], []
    for job in jobs:
        assert (job / "summary.json").exists()
        run = run_record(next(job.glob("wandb/offline-run-*/run-*.wandb")))
        groups.add(run.run_group)
        tags.append(set(run.tags))
        names.append(run.display_name)
    assert len(groups) == 1 and groups != {""}
    # each run is named from its overrides
    assert sum("model=tiny" in n for n in names) == 2 and sum("optim.amp=True" in n for n in names) == 2
    wanted = {"model:tiny", "hardware:cpu", "optim.amp=True"}
    assert wanted in [t & wanted for t in tags]
    assert not any("model=tiny" in t or "model=small" in t for t in tags)  # model:tiny says it once


@pytest.mark.heavy  # 21 s; joblib sweeps also in tests/runs/test_sweep_worker.py: killed and resumed, with failed jobs
def test_multirun_joblib_and_a_failing_job(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # as a user's shell has it: the sweep splits the cores
    sweep = tmp_path / "sweep"
    proc = run_cli(
        "-m",
        "hydra/launcher=joblib",
        *SMALL_RUN,
        "logger=jsonl",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.sweep.dir={sweep}",
        "model.hidden=32,-1",
        "model.heads=1",
        "hardware.threads=0",
        cwd=tmp_path,
        check=False,
    )
    assert "Joblib.Parallel(n_jobs=2," in proc.stdout + proc.stderr  # hardware=cpu's sweep_jobs
    # the sweep runs every job, then reports the failed one and exits non-zero
    assert proc.returncode == 1 and "1 of 2 jobs failed" in proc.stderr
    assert "job 1-model.hidden:-1: ConfigError: model.hidden=-1 must be >= 1" in proc.stderr
    assert "Traceback" not in proc.stderr
    ok, failed = job_dirs(sweep)
    assert (ok.name, failed.name) == ("0-model.hidden:32", "1-model.hidden:-1")  # named by what the sweep varies
    assert (ok / "summary.json").exists() and not (ok / "failed.json").exists()
    report = json.loads((failed / "failed.json").read_text())
    assert "model.hidden=-1 must be >= 1" in report["error"] and report["config"]["model"]["hidden"] == -1
    summary = json.loads((ok / "summary.json").read_text())
    assert math.isfinite(summary["best_val_optimality_gap"])
    # hardware.threads=0 is every core the job may use: its share of them, two jobs side by side
    assert summary["manifest"]["threads"] == max(1, len(os.sched_getaffinity(0)) // 2)
    run_cli("mode=compare", f"path={sweep}", f"hydra.run.dir={tmp_path / 'cmp'}", cwd=tmp_path)
    report = (sweep / "comparison.md").read_text()
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in report.splitlines() if line.startswith("|")]
    assert cells[0][:2] == ["seed group", "n"] and len(cells) == 3  # the header, its rule, the finished run
    assert "- 1-model.hidden:-1: ConfigError: model.hidden=-1 must be >= 1" in report
    with (sweep / "comparison.csv").open() as f:  # every run, the failed one too
        status = {row["run"]: (row["model.hidden"], row["status"]) for row in csv.DictReader(f)}
    assert status == {"0-model.hidden:32": ("32", "ok"), "1-model.hidden:-1": ("-1", "failed")}


@pytest.mark.heavy  # an optional sweeper plugin; the basic launcher's and joblib's sweeps run by default
def test_optuna_search_minimises_the_returned_gap(tmp_path) -> None:
    sweep = tmp_path / "search"
    run_cli(
        "hparams_search=optuna",
        "hydra.sweeper.n_trials=2",
        *SMALL_RUN,
        "logger=jsonl",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )

    result = OmegaConf.load(sweep / "optimization_results.yaml")
    gaps = [json.loads((job / "summary.json").read_text())["best_val_optimality_gap"] for job in job_dirs(sweep)]
    assert len(gaps) == 2
    assert result.best_value == pytest.approx(min(gaps))
    assert set(result.best_params) == {"train.lr", "model.hidden", "model.layers"}
