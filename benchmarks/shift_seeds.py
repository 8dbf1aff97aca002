"""Benchmark: the shifted-test-set table over seeds, mean +- std, from ``mode=eval`` runs.

    .venv/bin/python benchmarks/shift_seeds.py outputs/eval-seed0 outputs/eval-seed1 outputs/eval-seed2

Each argument is the run directory of one ``run.py mode=eval ckpt=...`` (one trained seed); its
``transfer.json["shifts"]`` holds every method's gap per test set. Prints, per set, the model's gap
(mean +- std over the runs), the baselines' (the same test scenes in every run, so one value), how
many runs beat greedy and stay within ``--points`` of their in-distribution gap, and writes
``shift_seeds.json`` into the first run directory.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from uavgnn.infrastructure.storage import write_json
from uavgnn.reporting.tables import format_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="mode=eval run directories (transfer.json)")
    parser.add_argument("--points", type=float, default=2.0, help="allowed gap above the in-distribution one (pts)")
    args = parser.parse_args()
    reports = [json.loads((run / "transfer.json").read_text())["shifts"] for run in args.runs]
    rows = []
    for i, line in enumerate(reports[0]):
        lines = [report[i] for report in reports]
        if any(other["test_set"] != line["test_set"] for other in lines):
            raise SystemExit(f"the runs do not share their test sets ({line['test_set']} at position {i})")
        model = np.array([other["model_gap"] for other in lines])
        row = {
            "test_set": line["test_set"],
            "runs": len(lines),
            "model_gap": f"{100 * model.mean():.2f} +- {100 * model.std(ddof=1) if len(lines) > 1 else 0.0:.2f}",
        }
        guided = [other["guided_gap"] for other in lines if "guided_gap" in other]
        if guided:
            row["guided_gap"] = f"{100 * np.mean(guided):.2f}"
        for method in ("greedy", "lap", "mcf"):
            row[f"{method}_gap"] = f"{100 * line[f'{method}_gap']:.2f}"
        row["beats_greedy"] = f"{sum(other['beats_greedy'] for other in lines)}/{len(lines)}"
        row["within_points"] = f"{sum(other['shift_cost'] <= args.points / 100 for other in lines)}/{len(lines)}"
        row["shift_cost"] = f"{100 * np.mean([other['shift_cost'] for other in lines]):+.2f}"
        rows.append(row)
    print(format_table(rows, list(rows[0])))
    write_json(args.runs[0] / "shift_seeds.json", {"runs": [str(run) for run in args.runs], "rows": rows})


if __name__ == "__main__":
    main()
