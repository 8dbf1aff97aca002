"""The rows of a comparison and their cells as shown: one per run and one mean row per seed group, named by what
the group shares, each metric in its unit with its interval and the best marked (every renderer reads them)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from uavgnn.reporting.figures import Metrics
from uavgnn.reporting.intervals import mean_interval
from uavgnn.reporting.run_metrics import group_labels
from uavgnn.runs.record import Run

MEAN = "mean ± std"


# what each kind of bracket a mean row can carry means (``intervals.mean_interval``'s kinds), in the legends
BRACKETS = {
    "t": "[low, high]: the 95% interval of the mean (Student's t)",
    "bootstrap": "[low, high]†: the 95% interval of the mean (percentile bootstrap)",
    "range": "[min, max]: the seeds' range, too few seeds for a 95% interval",
    "n/a": "[n/a]: no valid interval",
}


def bracket_legend(cells: Cells, metrics: Metrics, seed_means: bool = True) -> str:
    """What the brackets of the shown rows are: only the kinds that occur ("" if none)."""
    kinds = {cells.kind(row, metric) for row in shown_rows(cells.rows, seed_means) for metric in metrics.final}
    return "; ".join(text for kind, text in BRACKETS.items() if kind in kinds)


def table_rows(runs: list[Run], keys: list[str], metrics: Metrics, interval: str = "auto") -> list[dict[str, Any]]:
    """One row per run (values as recorded), grouped by their config without the seed; each group of >= 2 ok runs
    is followed by its mean row: mean, std over the seeds and the 95% interval of the mean (``<metric>_ci_low``,
    ``_ci_high``, ``_ci``: its method), by ``interval``'s rule. ``group`` numbers the groups (first appearance
    first), ``seeds`` counts a mean row's runs."""
    frame = pd.DataFrame(
        [
            {
                "run": r.name,
                **{k: r.config.get(k) for k in keys},
                "status": r.status,
                **r.metrics,
                "error": r.error,
                "label": label,
            }
            for r, label in zip(runs, group_labels(runs, keys))
        ]
    )
    # runs that differ by seed alone: named by their algorithm
    frame["label"] = frame["label"].where(frame["label"] != "", metrics.name)
    frame["group"] = pd.factorize(frame["label"])[0]
    rows: list[dict[str, Any]] = []
    for group, members in frame.groupby("group", sort=False):
        rows += members.to_dict("records")
        ok = members[members["status"] == "ok"]
        if "seed" not in keys or len(ok) < 2:
            continue
        first = members.iloc[0]
        mean = {
            "run": f"{MEAN} ({len(ok)} seeds)",
            **{k: first[k] for k in keys if k != "seed"},
            "seed": "*",
            "status": "ok",
            "error": "",
            "label": first["label"],
            "group": group,
            "seeds": len(ok),
        }
        for metric in metrics.final:
            values = ok[metric].dropna().to_numpy(dtype=float) if metric in ok else np.array([])
            if len(values) == 0:
                continue
            mean[metric] = float(values.mean())
            mean[f"{metric}_std"] = float(values.std(ddof=1)) if len(values) > 1 else 0.0
            found = mean_interval(values, metrics.bounds(metric), interval)
            if found is not None:
                mean.update(
                    {f"{metric}_ci_low": found.low, f"{metric}_ci_high": found.high, f"{metric}_ci": found.method}
                )
            else:
                mean[f"{metric}_ci"] = "n/a"
        rows.append(mean)
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()} for row in rows]


def is_mean(row: dict[str, Any]) -> bool:
    return str(row["run"]).startswith(MEAN)


def shown_rows(rows: list[dict[str, Any]], seed_means: bool = True) -> list[dict[str, Any]]:
    """The rows a reader compares: the finished runs and the mean rows; ``seed_means``: each group's mean row
    alone (a group without one - a single run - by its run)."""
    averaged = {r["group"] for r in rows if is_mean(r)}
    return [r for r in rows if r["status"] == "ok" and (not seed_means or is_mean(r) or r["group"] not in averaged)]


def row_name(row: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """A row as tables name it: its seed group (what its runs share: ``model=tiny``); a run of a group with others,
    its seed too; where that names no group, or two rows alike, the run directory."""
    label = row["label"] or "all runs"
    if is_mean(row):
        return label
    members = [r for r in rows if r["group"] == row["group"] and not is_mean(r)]
    name = label if len(members) == 1 else f"{label}, seed {row.get('seed', '?')}"
    same = [r for r in rows if not is_mean(r) and r["label"] == row["label"] and r.get("seed") == row.get("seed")]
    return row["run"] if not row["label"] or len(same) > 1 else name


def decimals(rows: list[dict[str, Any]], metrics: Metrics) -> dict[str, int]:
    """Decimals per metric column, as shown: 4 significant digits for its largest value, 0 to 4 decimals."""
    out = {}
    for metric in metrics.final:
        values = [abs(r[metric]) * metrics.scale(metric) for r in rows if isinstance(r.get(metric), float)]
        top = max((v for v in values if v > 0), default=1.0)
        out[metric] = int(min(4, max(0, 3 - math.floor(math.log10(top)))))
    return out


def best_cells(rows: list[dict[str, Any]], metrics: Metrics) -> dict[str, set[tuple[str, int]]]:
    """For each metric, the rows holding the best value as shown (ties all count) among what a reader compares:
    each seed group's mean row, and the runs of groups that have none; none where there is one such row."""
    candidates = shown_rows(rows)
    places = decimals(rows, metrics)
    best: dict[str, set[tuple[str, int]]] = {}
    for metric, higher in metrics.final.items():
        values = [
            (round(r[metric] * metrics.scale(metric), places[metric]), r["run"], r["group"])
            for r in candidates
            if isinstance(r.get(metric), float)
        ]
        if len(values) > 1:  # one row is compared with nothing: none is the best (ties: equal as shown, rounded)
            top = (max if higher else min)(v for v, _, _ in values)
            best[metric] = {(run, group) for v, run, group in values if v == top}
    return best


def is_best(best: dict[str, set[tuple[str, int]]], row: dict[str, Any], column: str) -> bool:
    return (row["run"], row["group"]) in best.get(column, set())


class Cells:
    """Every table's cells: a metric in its unit (percent for gaps and shares) with its column's decimals; a mean
    row's ``± std`` (sample standard deviation over its seeds) and its bracket (``BRACKETS``): ``[low, high]`` the
    95% interval of the mean (``†`` where the bootstrap gave it), ``[min ..., max ...]`` the seeds' range, ``[n/a]``
    for a mean without a valid interval and for a group's only run where seeds vary."""

    def __init__(self, rows: list[dict[str, Any]], keys: list[str], metrics: Metrics) -> None:
        self.rows, self.metrics, self.places = rows, metrics, decimals(rows, metrics)
        self.seeded = "seed" in keys

    def __call__(self, row: dict[str, Any], metric: str) -> str:
        value, bracket = self.parts(row, metric)
        return f"{value} {bracket}" if bracket else value

    def kind(self, row: dict[str, Any], metric: str) -> str | None:
        """The kind of a cell's bracket (a key of ``BRACKETS``: ``intervals.mean_interval``'s method, or n/a); None
        where it has none."""
        if not isinstance(row.get(metric), float):
            return None
        if row.get(f"{metric}_ci_low") is not None and row.get(f"{metric}_ci_high") is not None:
            return row.get(f"{metric}_ci")
        if row.get(f"{metric}_ci") == "n/a" or (self.seeded and not is_mean(row) and self.alone(row)):
            return "n/a"
        return None

    def parts(self, row: dict[str, Any], metric: str) -> tuple[str, str]:
        """The value (a mean: ``mean ± std``) and its bracket (or "")."""
        value = row.get(metric)
        if not isinstance(value, float):
            return ("" if value is None else str(value)), ""
        shown = self.number(value, metric)
        if row.get(f"{metric}_std") is not None:
            shown += f" ± {self.number(row[f'{metric}_std'], metric)}"
        kind = self.kind(row, metric)
        if kind == "n/a":
            return shown, "[n/a]"
        if kind is None:
            return shown, ""
        low, high = (self.number(row[f"{metric}_ci_{end}"], metric) for end in ("low", "high"))
        if kind == "range":
            return shown, f"[min {low}, max {high}]"  # said as such: not an interval
        return shown, f"[{low}, {high}]{'†' if kind == 'bootstrap' else ''}"

    def number(self, value: float, metric: str) -> str:
        return f"{value * self.metrics.scale(metric):.{self.places[metric]}f}"  # no thousands commas: [1200, 1500]

    def alone(self, row: dict[str, Any]) -> bool:
        return not any(is_mean(r) for r in self.rows if r["group"] == row["group"])


def header(metrics: Metrics, metric: str) -> str:
    """A metric's column: its readable name and unit, and which way is better."""
    return f"{metrics.label(metric)} {'↑' if metrics.final[metric] else '↓'}"
