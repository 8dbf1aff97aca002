"""How long the main job should train, chosen on validation: a sweep of ``train.steps`` over seeds, each run's
``best.pt`` scored on a held-out selection set of fresh scenes (its own seed, disjoint from the training,
validation and test splits; 2,048 scenes: a 95% half-width near 0.09 points, against 0.22-0.29 on the 256 test
scenes), beside its own validation and test gaps; per length the mean +- std over the seeds.

    .venv/bin/python run.py -m train.steps=300,600,1000,1500 seed=0,1,2 logger=jsonl hardware.threads=1 \\
        hydra.sweep.dir=outputs/main-length                               # ~20 min on one core
    .venv/bin/python benchmarks/main_job_length.py outputs/main-length   # ~6 min: 12 evaluations

The length to choose is the one with the lowest selection-set gap; the test gaps are reported, not chosen on.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from uavgnn.program.from_python import run
from uavgnn.reporting.tables import format_table
from uavgnn.runs.layout import SUMMARY
from uavgnn.runs.record import find_runs, load_run

SELECTION_SEED = 4_000_000  # the held-out selection scenes: base seed beside train (1M), val (2M), test (3M)


def selection_gap(run_dir: Path, out: Path, scenes: int) -> float:
    """The model's gap on the selection scenes (``mode=eval`` of the run's ``best.pt``, the model row alone)."""
    if not (out / "transfer.json").exists():
        run(
            [
                "mode=eval",
                f"ckpt={run_dir / 'best.pt'}",
                f"data.test_scenes={scenes}",
                f"data.test_seed={SELECTION_SEED}",
                f"eval.max_total_uavs={16 * scenes}",
                "eval.positions=[uniform]",
                "eval.keeps=[]",
                "eval.milp_budgets=[]",
                "eval.best_of=0",
                "eval.shift_sets=[]",
                "logger=none",
            ],
            out,
        )
    rows = json.loads((out / "transfer.json").read_text())["rows"]
    return next(r["optimality_gap"] for r in rows if r["method"] == "model (greedy)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path, help="the sweep of train.steps and seed")
    parser.add_argument("--scenes", type=int, default=2048, help="selection scenes of 16 UAVs")
    parser.add_argument("--out", type=Path, default=None, help="the evaluations (default: <sweep>-selection)")
    args = parser.parse_args()
    out = args.out or args.sweep.with_name(args.sweep.name + "-selection")
    by_length: dict[int, list[tuple[float, float, float]]] = {}
    for run_dir in find_runs([args.sweep]):
        record = load_run(run_dir)
        summary = json.loads((run_dir / SUMMARY).read_text())
        held_out = selection_gap(run_dir, out / run_dir.name, args.scenes)
        steps = int(record.config["train.steps"])
        by_length.setdefault(steps, []).append(
            (summary["best_val_optimality_gap"], held_out, summary["test/optimality_gap"])
        )
    rows = []
    for steps, values in sorted(by_length.items()):
        row = {"train.steps": steps, "seeds": len(values)}
        for i, name in enumerate(("validation (256)", f"selection ({args.scenes:,})", "test (256)")):
            column = [100 * v[i] for v in values]
            spread = statistics.stdev(column) if len(column) > 1 else 0.0
            row[f"{name} gap %"] = f"{statistics.mean(column):.3f} +- {spread:.3f}"
            row[f"{name} each"] = " / ".join(f"{c:.2f}" for c in column)
        rows.append(row)
    print(format_table(rows))
    chosen = min(by_length, key=lambda s: statistics.mean(v[1] for v in by_length[s]))
    print(f"lowest selection-set gap: train.steps={chosen}")


if __name__ == "__main__":
    main()
