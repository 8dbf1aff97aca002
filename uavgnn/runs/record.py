"""Reading finished runs back (a sweep's jobs or any run directories): config, final metrics, history.

A file that cannot be read - a truncated ``summary.json``, a ``summary.json`` that is not an object, a torn
middle line of ``metrics.jsonl``, a broken ``.hydra/config.yaml`` - makes its run ``damaged``, named with the file
and the problem, instead of stopping whatever reads it (``mode=compare``).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from uavgnn.infrastructure.console import echo
from uavgnn.infrastructure.errors import RunDirectoryError
from uavgnn.infrastructure.memory import gigabytes
from uavgnn.infrastructure.nested import flatten
from uavgnn.runs.directory import job_number
from uavgnn.runs.history import thinned_history
from uavgnn.runs.layout import FAILED, HISTORY, HYDRA_CONFIG, HYDRA_OVERRIDES, HYDRA_RECORD, SUMMARY, SWEEP_RECORD

MAX_HISTORY_ROWS = 200_000  # rows of a run's history a comparison keeps (a longer one: every k-th, said)


@dataclass
class Run:
    name: str
    directory: Path
    status: str  # ok | failed | incomplete | damaged (a file of it unreadable: ``error`` says which)
    config: dict[str, Any]  # flattened: {"model.hidden": 64, ...}
    metrics: dict[str, float]  # summary.json's best_val_* and test/*, each perf/<unit>_per_s's median, peak_mem_mb
    history: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    overrides: tuple[str, ...] = ()  # its command line's (``.hydra/overrides.yaml``): ``model=tiny``, ``seed=1``


def is_run(directory: Path) -> bool:
    return any((directory / f).exists() for f in (SUMMARY, FAILED, HISTORY, HYDRA_RECORD))


def find_runs(paths: list[Path]) -> list[Path]:
    """Run directories among ``paths``: each path itself, or (a sweep) its run subdirectories."""
    runs: list[Path] = []
    for path in paths:
        if not path.is_dir():
            raise FileNotFoundError(f"path: {path} is not a directory")
        if is_run(path) and not (path / SWEEP_RECORD).exists():
            runs.append(path)
        else:
            runs += sorted((p for p in path.iterdir() if p.is_dir() and is_run(p)), key=lambda p: job_number(p.name))
    if not runs:
        raise FileNotFoundError(f"path: no run directories under {', '.join(map(str, paths))}")
    return runs


def load_run(directory: Path) -> Run:
    """A run's config, final metrics and history; a file that cannot be read (truncated ``summary.json``, a
    torn middle line of ``metrics.jsonl``, ...) makes the run ``damaged``, named with the file and the problem,
    instead of stopping the comparison."""
    config_path = directory / HYDRA_RECORD / HYDRA_CONFIG
    config, problem = _read(
        config_path, lambda: flatten(OmegaConf.to_container(OmegaConf.load(config_path), resolve=False)), {}
    )
    (history, stride), history_problem = _read(
        directory / HISTORY, lambda: thinned_history(directory, MAX_HISTORY_ROWS), ([], 1)
    )
    if stride > 1:
        echo(
            f"compare: {directory.name}'s history is long ({_size(directory / HISTORY)}): read as a stream, its "
            f"curves and speeds from one row in every {stride} (a comparison keeps at most {MAX_HISTORY_ROWS:,} "
            "rows a run)"
        )
    overrides_path = directory / HYDRA_RECORD / HYDRA_OVERRIDES
    overrides, overrides_problem = _read(overrides_path, lambda: tuple(map(str, OmegaConf.load(overrides_path))), ())
    problem = problem or history_problem or overrides_problem
    metrics: dict[str, float] = {}
    status, error = "incomplete", ""
    if (directory / SUMMARY).exists():
        summary, summary_problem = _read(directory / SUMMARY, lambda: _object(directory / SUMMARY), {})
        problem = problem or summary_problem
        metrics.update(
            {
                key: float(value)
                for key, value in summary.items()  # the final ones, of any algorithm
                if key.startswith(("best_val_", "test/"))
                and isinstance(value, (int, float))
                and not isinstance(value, bool)
            }
        )
        status = "ok"
    elif (directory / FAILED).exists():
        failed, failed_problem = _read(directory / FAILED, lambda: _object(directory / FAILED), {})
        status, error, problem = "failed", str(failed.get("error", "")), problem or failed_problem
    if problem:
        echo(f"compare: {directory.name} is damaged: {problem}; listed as damaged", err=True)
        return Run(directory.name, directory, "damaged", config, {}, [], problem, overrides)
    memory = [r["perf/peak_mem_mb"] for r in history if "perf/peak_mem_mb" in r]
    if status == "ok":
        speeds: dict[str, list[float]] = {}  # each speed it logged (graphs, env_steps...): its median
        for row in history:
            for key, value in row.items():
                if key.startswith("perf/") and key.endswith("_per_s"):
                    speeds.setdefault(key.removeprefix("perf/"), []).append(value)
        metrics.update({key: statistics.median(values) for key, values in speeds.items()})
        metrics["peak_mem_mb"] = max(memory) if memory else math.nan
    return Run(directory.name, directory, status, config, metrics, history, error, overrides)


def _size(path: Path) -> str:
    return gigabytes(path.stat().st_size)


def read_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None where it is missing, unreadable, torn or not an object."""
    value, problem = _read(path, lambda: _object(path), None)
    return None if problem else value


def _object(path: Path) -> dict[str, Any]:
    value = json.loads(path.read_text())
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value


def _read(path: Path, parse: Any, empty: Any) -> tuple[Any, str]:
    """``parse()`` of a run file, or ``empty`` and what is wrong with it (named with the file)."""
    if not path.exists():
        return empty, ""
    try:
        return parse(), ""
    except (
        OSError,
        ValueError,
        TypeError,
        AttributeError,
        yaml.YAMLError,
        RunDirectoryError,
        OmegaConfBaseException,
    ) as err:
        detail = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
        return empty, f"{path.name}: {detail}"
