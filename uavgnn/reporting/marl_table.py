"""The MARL comparison: environment policies' runs by their own test tables, aggregated as the MARL community
reports them.

One path (``mode=compare`` over such runs, and ``benchmarks/compare_marl.py`` on run directories) reads what each
run's test phase measured - ``summary.json``'s ``test`` table: the best policy greedy on ``env.val_episodes``
fixed test episodes (``uavgnn.evaluation.episodes.TEST_SEED``) of the horizon it was trained for, beside the scripted
planner, nearest targets and random actions on the same episodes - and replays nothing, so every number is the
run's own. Then, per algorithm (the runs' seed group without the ``env``/``task`` choices): the interquartile
mean over its runs and tasks with its 95% stratified-bootstrap interval (``intervals.stratified_bootstrap``:
rliable's method), and ``marl_eval.json``, the runs in marl-eval's raw-data format (environment -> task ->
algorithm -> run -> ``step_<i>`` for each validation, ``absolute_metrics`` for the test table), for its plots.

A task is what fixes the test episodes: the environment, its action mode, UAVs, horizon, scene distribution and
episode count; returns of different tasks are not comparable (``test/of_planner``, the share of the planner's
return on the same episodes, is the normalised score to aggregate across tasks).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from uavgnn.reporting.figures import Metrics
from uavgnn.reporting.intervals import stratified_bootstrap
from uavgnn.reporting.run_metrics import label_parts
from uavgnn.runs.layout import SUMMARY
from uavgnn.runs.record import Run, read_object

TASK_GROUPS = ("env", "task")  # config groups whose choices make another task, not another algorithm
TEST_KEYS = ("return", "return_std", "completion_rate", "collisions", "of_planner")  # a test table's figures
VALIDATION = {"return": "val/return", "completion_rate": "val/completion_rate", "collisions": "val/collisions"}


def task_of(run: Run) -> str:
    """The test episodes a run was scored on, in words (runs of one task played the same episodes)."""
    c = run.config
    return (
        f"{c.get('env.name', 'default')} env, {c.get('env.action', 'continuous')} actions, "
        f"{c.get('env.n_uav', '?')} UAVs, {c.get('env.horizon', '?')} steps, {c.get('task.positions', 'uniform')} "
        f"scenes, {c.get('env.val_episodes', '?')} episodes"
    )


def algorithm_labels(runs: Sequence[Run], keys: list[str]) -> list[str]:
    """Each run's algorithm as the comparison names it: its seed group's label without the choices that make
    another task (``env``, ``task``); runs that differ in nothing else: the algorithm's name."""
    labels = []
    for run, parts in zip(runs, label_parts(list(runs), keys)):
        kept = [f"{k}={v}" for k, v in parts if k.split(".")[0].split("/")[0] not in TASK_GROUPS]
        labels.append(", ".join(kept) or str(run.config.get("algorithm.name", "?")))
    return labels


def test_table(run: Run) -> list[dict[str, Any]]:
    """The run's own test table (``summary.json``'s ``test`` rows, as its test phase printed them)."""
    summary = read_object(run.directory / SUMMARY) or {}
    rows = summary.get("test")
    return [row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else []


def test_tables(runs: Sequence[Run], labels: Sequence[str]) -> list[dict[str, Any]]:
    """Every run's policy row from its own test table, then each task's references (the planner, nearest targets,
    random actions: the same episodes, so the same rows in every run of the task) once, after its runs."""
    out: list[dict[str, Any]] = []
    references: dict[str, list[dict[str, Any]]] = {}
    for run, label in zip(runs, labels):
        table, task = test_table(run), task_of(run)
        if not table:
            continue
        out.append(
            {"task": task, "method": label, "seed": run.config.get("seed"), "run": run.name, **_figures(table[0])}
        )
        references.setdefault(task, [{"task": task, "method": row["method"], **_figures(row)} for row in table[1:]])
    return [row for task, refs in references.items() for row in [r for r in out if r["task"] == task] + refs]


SHOWN = {  # a test table's columns as the comparison shows them: shares in percent
    "method": "method",
    "seed": "seed",
    "return": "return",
    "return_std": "return std",
    "completion_rate": "completion (%)",
    "collisions": "collisions",
    "of_planner": "return / planner's (%)",
}


def in_percent(row: dict[str, Any]) -> dict[str, Any]:
    """A test-table row as shown (``SHOWN``): completion and the share of the planner's return in percent."""
    shares = ("completion_rate", "of_planner")
    return {
        name: 100 * row[k] if k in shares and isinstance(row.get(k), (int, float)) else row.get(k)
        for k, name in SHOWN.items()
    }


def _figures(row: dict[str, Any]) -> dict[str, Any]:
    return {key: row.get(key) for key in TEST_KEYS}


def aggregate(runs: Sequence[Run], labels: Sequence[str], metrics: Metrics) -> list[dict[str, Any]]:
    """Per algorithm: the IQM of each shown test metric over its runs and tasks, with its 95% stratified-bootstrap
    interval (``<metric>_low``, ``<metric>_high``), the runs and the tasks it counts."""
    keys = [k for k in metrics.final if k.startswith("test/")]
    by_algorithm: dict[str, dict[str, list[Run]]] = {}
    for run, label in zip(runs, labels):
        by_algorithm.setdefault(label, {}).setdefault(task_of(run), []).append(run)
    rows = []
    for label, tasks in by_algorithm.items():
        row: dict[str, Any] = {"algorithm": label, "runs": sum(map(len, tasks.values())), "tasks": len(tasks)}
        for key in keys:
            scores = [
                [r.metrics[key] for r in members if math.isfinite(r.metrics.get(key, math.nan))]
                for members in tasks.values()
            ]
            if all(scores):
                point, interval = stratified_bootstrap(scores)
                row.update({key: point, f"{key}_low": interval.low, f"{key}_high": interval.high})
        rows.append(row)
    return rows


def marl_eval_data(runs: Sequence[Run], labels: Sequence[str]) -> dict[str, Any]:
    """The runs in marl-eval's raw-data format: ``{environment: {task: {algorithm: {run: {"step_<i>": {"step_count":
    step, metric: [value]}, ..., "absolute_metrics": {metric: [value]}}}}}}``; the steps are the validations (the
    fixed validation episodes' means), the absolute metrics the run's test table (each a list of one value: a
    mean over the test episodes, as marl-eval takes for a metric computed over many episodes)."""
    data: dict[str, Any] = {}
    for run, label in zip(runs, labels):
        table = test_table(run)
        if not table:
            continue
        c = run.config
        environment = f"uavgnn-{c.get('env.name', 'default')}"
        task = (
            f"{c.get('task.positions', 'uniform')}-{c.get('env.n_uav', '?')}uav-{c.get('env.action', 'continuous')}"
            f"-{c.get('env.horizon', '?')}steps"
        )
        algorithm = data.setdefault(environment, {}).setdefault(task, {}).setdefault(label, {})
        name = f"seed_{c.get('seed', 0)}"
        if name in algorithm:
            name = f"{name}_{run.name}"
        steps = [h for h in run.history if "val/return" in h]
        record: dict[str, Any] = {
            f"step_{i}": {
                "step_count": int(h["step"]),
                **{m: [float(h[k])] for m, k in VALIDATION.items() if k in h},
                **(
                    {"of_planner": [float(h["val/return"]) / h["val/planner_return"]]}
                    if h.get("val/planner_return")
                    else {}
                ),
            }
            for i, h in enumerate(steps)
        }
        record["absolute_metrics"] = {
            key: [float(table[0][key])] for key in TEST_KEYS if isinstance(table[0].get(key), (int, float))
        }
        algorithm[name] = record
    return data
