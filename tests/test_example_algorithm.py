"""The algorithm of docs/adding-an-algorithm.md, from outside the package: ``examples/a2c`` holds it
(``uavgnn_a2c.py``) and the ``dist-info`` that names it in the entry-point group ``uavgnn.algorithms``, as pip installs
a package that declares it. With that folder on PYTHONPATH the real program lists it, trains it, resumes it exactly,
evaluates its checkpoint and compares its runs, and the modes that time a step say in one line what times it; no
file of uavgnn names it. A plug-in that does not load, or takes a built-in's name, is one line naming its entry
point."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, job_dirs, run_cli

from uavgnn.algorithms.base import Algorithm
from uavgnn.algorithms.registry import PLUGINS, algorithm_class, algorithms, broken_plugins
from uavgnn.envs.settings import EnvSettings
from uavgnn.infrastructure.errors import ConfigError

PLUGIN = ROOT / "examples" / "a2c"
HIDDEN, EPISODES, HORIZON = 8, 8, 10  # per update: 8 episodes of 10 steps, validated and tested on 8 episodes
A2C = [
    "algorithm=a2c",
    "model=mlp",
    f"model.hidden={HIDDEN}",
    "model.layers=1",
    "hardware.threads=1",
    f"hardware.batch_size={EPISODES}",
    f"env.val_episodes={EPISODES}",
    f"env.horizon={HORIZON}",
    "train.eval_every=3",
    "train.ckpt_every=3",
    "train.log_every=1",
    "train.schedule=plateau",
    "train.warmup_steps=0",
    "logger=jsonl",
]
METHODS = ["a2c", "scripted planner", "decentralised planner", "CBBA", "nearest target", "random"]


def logged(run: Path) -> dict[int, dict[str, float]]:
    """A run's training and validation figures by step (timings, which vary, left out)."""
    rows: dict[int, dict[str, float]] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        figures = {key: value for key, value in row.items() if key.split("/")[0] in ("train", "val")}
        rows.setdefault(row.pop("step"), {}).update(figures)
    return rows


def refused(proc) -> list[str]:
    """What a refused run printed: exit code 2 and its stderr lines, with no traceback anywhere."""
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc.stderr.strip().splitlines()


@pytest.mark.slow
def test_a_plug_in_outside_the_package_runs_every_mode(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(PLUGIN), os.environ.get("PYTHONPATH")])))
    sources = [p for p in (ROOT / "uavgnn").rglob("*") if p.suffix in (".py", ".yaml")]
    assert sources and not [p for p in sources if re.search(r"\ba2c\b", p.read_text())]  # no file of uavgnn names it
    lines = run_cli("--help", cwd=tmp_path).stdout.splitlines()  # listed as the built-ins are, with its summary
    assert any(line.split()[:1] == ["a2c"] and "advantage actor-critic" in line for line in lines)
    options = next(line.strip() for line in lines if line.strip().startswith("algorithm: "))  # the group's options
    assert "a2c" in options.removeprefix("algorithm:").strip().split(", ")
    sweep = tmp_path / "sweep"  # one process: a run stopped at step 3, and an uninterrupted one of 6 steps
    run_cli("-m", *A2C, "train.steps=3,6", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    stopped, straight = job_dirs(sweep)
    summary = json.loads((straight / "summary.json").read_text())
    assert [row["method"] for row in summary["test"]] == METHODS
    obs = EnvSettings(horizon=HORIZON).obs_dim()
    actor, critic = (obs + 1) * HIDDEN + (HIDDEN + 1) * 2 + 2, (obs + 1) * HIDDEN + HIDDEN + 1  # + the log std
    assert summary["params"] == actor + critic

    run_cli(*A2C, "train.steps=6", "resume=auto", f"hydra.run.dir='{stopped}'", cwd=tmp_path)
    resumed = logged(stopped)
    assert resumed == logged(straight) and sorted(resumed) == list(range(7))  # steps 4-6 as if never stopped
    assert resumed[6]["train/env_steps"] == 6 * EPISODES * HORIZON  # a fresh collection before every update
    weights = [torch.load(run / "last.pt", weights_only=True)["model"] for run in (stopped, straight)]
    assert all(torch.equal(weights[0][name], value) for name, value in weights[1].items())

    run_cli(
        "mode=eval",
        f"ckpt='{straight / 'best.pt'}'",
        f"eval.episodes={EPISODES}",
        "eval.scales=[4]",
        "eval.disruption_sets=[]",
        "hardware.threads=1",
        "logger=none",
        f"hydra.run.dir={tmp_path / 'eval'}",
        cwd=tmp_path,
    )
    report = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert report["algorithm"] == "a2c" and [row["method"] for row in report["rows"]] == METHODS
    tested = {row["method"]: row["return"] for row in summary["test"]}  # the test phase: best.pt, same episodes
    assert {row["method"]: row["return"] for row in report["rows"]} == tested

    run_cli("mode=compare", f"path={sweep}", "hardware.threads=1", "logger=none", cwd=tmp_path)
    with (sweep / "comparison.csv").open() as f:
        rows = {row["run"]: row for row in csv.DictReader(f)}
    assert set(rows) == {stopped.name, straight.name}  # one config: resuming it does not make another
    assert "resume" not in rows[stopped.name]
    for run in (stopped, straight):
        best = json.loads((run / "summary.json").read_text())["best_val_planner_gap"]
        assert float(rows[run.name]["best_val_planner_gap"]) == pytest.approx(best)

    timer = Algorithm.timed_by  # what the example leaves as it is: its run's perf/ figures
    benchmarked = ", ".join(name for name, found in algorithms().items() if found.benchmarked)
    for mode, message in [
        (
            "benchmark",
            f"mode=benchmark measures the scene-assignment pipeline of algorithm="
            f"{benchmarked}; algorithm=a2c: time it with {timer}",
        ),
        (
            "profile",
            "mode=profile times steps on a fixed dataset; algorithm=a2c collects "
            f"experience as it trains: time it with {timer}",
        ),
    ]:
        proc = run_cli(f"mode={mode}", *A2C, f"hydra.run.dir={tmp_path / mode}", cwd=tmp_path, check=False)
        assert refused(proc) == [f"error: {message}"] and not (tmp_path / mode).exists()


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``installed(entry_points, **modules)``: a distribution ``broken`` on ``sys.path`` with these lines in its
    ``entry_points.txt`` and these modules beside it; the registry looks again before and after."""

    def install(*lines: str, **modules: str) -> None:
        info = tmp_path / "broken-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text("\n".join([f"[{PLUGINS}]", *lines, ""]))
        for name, source in modules.items():
            (tmp_path / f"{name}.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        algorithms.cache_clear()

    yield install
    algorithms.cache_clear()


@pytest.mark.parametrize(
    "line, modules, says",
    [
        (
            "missing = not_installed:Missing",
            {},
            "cannot be loaded (ModuleNotFoundError: No module named 'not_installed')",
        ),
        (
            "failing = failing_plugin",
            {"failing_plugin": "raise RuntimeError('needs CUDA\\nsee the README')"},
            "cannot be loaded (RuntimeError: needs CUDA)",
        ),
        ("mappo = uavgnn.algorithms.mappo:MAPPO", {}, "algorithm 'mappo' is already uavgnn.algorithms.mappo.MAPPO"),
        (
            "dumps = json:dumps",
            {},
            "names neither a subclass of uavgnn.algorithms.base.Algorithm with a name nor a module defining one",
        ),
        (
            "empty = json",
            {},
            "names neither a subclass of uavgnn.algorithms.base.Algorithm with a name nor a module defining one",
        ),
    ],
)
def test_a_broken_plug_in_is_one_line_naming_its_entry_point_when_chosen(installed, line, modules, says) -> None:
    """A plug-in that does not load blocks nothing else: the built-ins are there; choosing it is one line."""
    installed(line, **modules)
    assert {"mappo", "masac", "imitation"} <= set(algorithms())
    name, said = line.split(" = ")[0], f"algorithm plug-in {line} (entry point of broken, group {PLUGINS}): {says}"
    assert broken_plugins() == {name: said}
    if name == "mappo":  # the built-in it would have replaced is kept
        assert algorithm_class(name).__module__ == "uavgnn.algorithms.mappo"
        return
    with pytest.raises(ConfigError) as err:
        algorithm_class(name)
    assert str(err.value) == said


def test_a_broken_plug_in_blocks_no_run_of_the_program(tmp_path, installed) -> None:
    """Through the real program: a plug-in whose import fails leaves every built-in algorithm usable; chosen, it
    is one line naming its entry point."""
    installed("failing = failing_plugin", failing_plugin="raise RuntimeError('needs CUDA')")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    ours = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "algorithm=masac", "--cfg", "job"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ours.returncode == 0 and "name: masac" in ours.stdout, ours.stderr[-2000:]
    chosen = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "algorithm=failing", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = f"algorithm plug-in failing = failing_plugin (entry point of broken, group {PLUGINS}): cannot be loaded"
    assert chosen.returncode == 2 and refused(chosen)[-1] == f"error: {said} (RuntimeError: needs CUDA)"
    assert f"{said} (RuntimeError: needs CUDA); the other algorithms work" in ours.stderr  # said, not hidden
    assert not (tmp_path / "run").exists()


def test_a_plug_in_module_registers_each_algorithm_it_defines(installed) -> None:
    """An entry point may name a module: each ``Algorithm`` subclass with a name defined there (not imported)."""
    installed(
        "several = two_algorithms",
        two_algorithms="\n".join(
            [
                "from uavgnn.algorithms.mappo import MAPPO",
                "class One(MAPPO):",
                "    name = 'one'",
                "class Two(MAPPO):",
                "    name = 'two'",
            ]
        ),
    )
    found = algorithms()
    assert {name: found[name].__qualname__ for name in found if found[name].__module__ == "two_algorithms"} == {
        "one": "One",
        "two": "Two",
    }
    assert {"mappo", "masac", "imitation"} <= set(found)  # the built-ins beside them
