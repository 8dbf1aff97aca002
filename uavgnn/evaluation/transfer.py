"""An assignment policy's test sets in ``mode=eval``: zero-shot at every scale, on every distribution of positions,
and under distribution shift.

``transfer_ratio`` = the model's score at a scale / its score at the training size, with score =
``1 - optimality_gap``; below ``TRANSFER_FAILED`` the original guide's "zero-shot transfer failed" warning is
raised. The shift sets, at the training size: the trained task's own test set (``in-distribution``) and each
``eval.shifts`` set (``task=uniform`` with some fields changed: fixed, whatever the training task); each set's
gaps, whether the model beats greedy and its gap minus the in-distribution gap (``shift_cost``).
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from uavgnn.evaluation.methods import SHOWN
from uavgnn.problem.scenes import SceneDistribution

log = logging.getLogger(__name__)
TRANSFER_FAILED = 0.5  # the original guide's threshold on transfer_ratio
IN_DISTRIBUTION = "in-distribution"
COLUMNS = [  # the table of every set
    "positions",
    "n_uav",
    "scenes",
    *SHOWN,
    "bound_gap",
    "reference_optimal",
    "transfer_ratio",
    "time_s",
    "build_s",
    "forward_s",
    "decode_s",
    "milp_s",
    "note",
]
SHIFT_COLUMNS = ("model", "pruned", "greedy", "lap", "mcf")  # shift_summary's gaps: <name>_gap


def shift_tasks(trained_task: dict[str, Any], shifts: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The trained task's own test set and each shift (``{name: fields of task=uniform changed}``), as tasks; none
    without shifts."""
    if not shifts:
        return {}
    tasks = {IN_DISTRIBUTION: {**trained_task, "file": None}}
    tasks.update(
        {
            name: {**asdict(SceneDistribution()), **fields, "name": name, "file": None, "folder": None}
            for name, fields in shifts.items()
        }
    )
    return tasks


def transfer_ratios(rows: list[dict[str, Any]], positions: list[str], train_size: int) -> list[dict[str, Any]]:
    """Each distribution's ``transfer_ratio`` at each scale (also set on the model's rows), with a warning where
    zero-shot transfer failed."""
    transfer = []
    for where in positions:
        model_rows = {r["n_uav"]: r for r in rows if r["positions"] == where and r["method"].startswith("model (")}
        base = 1 - model_rows[train_size]["optimality_gap"]
        for n_uav, row in model_rows.items():
            ratio = (1 - row["optimality_gap"]) / base if base > 0 else float("nan")
            row["transfer_ratio"] = ratio
            transfer.append({"positions": where, "n_uav": n_uav, "transfer_ratio": ratio})
            if ratio < TRANSFER_FAILED:
                log.warning(
                    "zero-shot transfer failed: %s scenes of %d UAVs score %.2f x the training size's",
                    where,
                    n_uav,
                    ratio,
                )
    return transfer


def shift_summary(rows: list[dict]) -> list[dict]:
    """One line per test set: the gaps of the model's decision, of the model-pruned MILP (its largest keep), greedy,
    lap and min-cost flow, whether the model beats greedy, and its gap minus the in-distribution gap."""
    gaps: dict[str, dict[str, Any]] = {}
    for row in rows:
        line = gaps.setdefault(row["test_set"], {"test_set": row["test_set"], "scenes": row["scenes"]})
        method, gap = row["method"], row.get("optimality_gap", float("nan"))
        if method.startswith("model (") and "model_gap" not in line:
            line["model_gap"] = gap
        elif method.startswith("model-pruned milp"):
            line["pruned_gap"] = gap  # the rows come keep by keep: the largest last
        elif method in SHIFT_COLUMNS:
            line[f"{method}_gap"] = gap
    base = gaps.get(IN_DISTRIBUTION, {}).get("model_gap", float("nan"))
    for line in gaps.values():
        line["beats_greedy"] = bool(line["model_gap"] < line["greedy_gap"])
        line["shift_cost"] = line["model_gap"] - base
    return list(gaps.values())
