"""The dynamics model's data pipeline (normalised once vs reference/004's per-sample normalisation), and the
test tables of a sweep over seeds (the TCN against its baselines; each setting's mean +- std).

    .venv/bin/python benchmarks/bench_dynamics.py --section pipeline
    .venv/bin/python run.py -m algorithm=dynamics logger=jsonl seed=0,1,2 algorithm.lambda_physics=0,0.5 \\
        hydra.sweep.dir=multirun/dynamics-physics
    .venv/bin/python benchmarks/bench_dynamics.py --section test --sweep multirun/dynamics-physics

Pipeline: samples/s of the loader alone (``naive``: ``NaiveWindows`` through a
torch DataLoader with default collation, the guide's slow path; ``cached``:
``TrajectoryWindows.gather``, one indexing per tensor) and of whole training
steps (loader + forward + backward + optimiser) with the default TCN, the
pipelines interleaved, medians of ``--repeats``. The rollouts come from the
default config's cache (simulated on first use).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path

import torch
import yaml
from torch.utils.data import DataLoader

from uavgnn.algorithms.registry import make_algorithm, make_model
from uavgnn.dynamics.windows import NaiveWindows, collate_naive
from uavgnn.dynamics.workload import TrajectoryWorkload
from uavgnn.program.from_python import compose_config


def pipelines(work: TrajectoryWorkload, batch_size: int) -> dict[str, object]:
    """Endless batch iterators of the naive and the cached pipeline over the same training windows."""
    naive = NaiveWindows(work.load("train"), work.stats, work.units, work.window + work.predict_steps)
    loader = DataLoader(
        naive,
        batch_size=batch_size,
        shuffle=True,
        collate_fn=collate_naive,
        num_workers=work.loading.num_workers,
        drop_last=True,
    )
    return {
        "naive": itertools.chain.from_iterable(itertools.repeat(loader)),
        "cached": work.host_batches(0, batch_size),
    }


def samples_per_s(batches, steps: int, batch_size: int, train_step=None) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        batch = next(batches)
        if train_step is not None:
            train_step(batch)
    return steps * batch_size / (time.perf_counter() - start)


def pipeline(cfg, repeats: int, steps: int) -> dict[str, object]:
    device = torch.device("cpu")
    algorithm = make_algorithm(cfg, device)
    work = algorithm.workload(None)
    model = make_model(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    batch_size = cfg.hardware.batch_size

    def train_step(batch) -> None:
        loss = algorithm.training_step(model, batch, None).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    iters = pipelines(work, batch_size)
    loader_only = {name: [] for name in iters}
    training = {name: [] for name in iters}
    for batches in iters.values():  # warm-up: first DataLoader epoch, allocator
        samples_per_s(batches, 3, batch_size, train_step)
    for _ in range(repeats):
        for name, batches in iters.items():
            loader_only[name].append(samples_per_s(batches, steps * 4, batch_size))
            training[name].append(samples_per_s(batches, steps, batch_size, train_step))
    result = {
        "batch_size": batch_size,
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "loader_samples_per_s": {n: statistics.median(v) for n, v in loader_only.items()},
        "training_samples_per_s": {n: statistics.median(v) for n, v in training.items()},
        "spread": {n: [min(v), max(v)] for n, v in training.items()},
    }
    result["loader_ratio"] = result["loader_samples_per_s"]["cached"] / result["loader_samples_per_s"]["naive"]
    result["training_ratio"] = result["training_samples_per_s"]["cached"] / result["training_samples_per_s"]["naive"]
    return result


TEST_KEYS = ("k_step_rmse", "velocity_rmse", "disturbance_rmse", "disturbance_edge_rmse", "disturbance_interior_rmse")


def test_tables(sweep: Path) -> dict[str, dict[str, object]]:
    """Mean +- std over seeds of every (setting, split, method) row of the sweep's test tables; a setting is a
    job's overrides without its seed."""
    runs: dict[str, list[dict]] = {}
    for summary in sorted(sweep.glob("*/summary.json")):
        overrides = yaml.safe_load((summary.parent / ".hydra" / "overrides.yaml").read_text())
        setting = " ".join(o for o in overrides if not o.startswith("seed="))
        runs.setdefault(setting, []).append(json.loads(summary.read_text()))
    table = {}
    for setting, summaries in runs.items():
        for row in summaries[0]["test"]:
            rows = [
                next(r for r in s["test"] if (r["split"], r["method"]) == (row["split"], row["method"]))
                for s in summaries
            ]
            keys = [*TEST_KEYS, *(k for k in row if k.startswith("step_"))]
            table[f"{setting} | {row['split']} | {row['method']}"] = {
                "seeds": len(rows),
                **{
                    key: (
                        statistics.mean(r[key] for r in rows),
                        statistics.stdev(r[key] for r in rows) if len(rows) > 1 else 0.0,
                    )
                    for key in keys
                    if key in row
                },
            }
    return table


def markdown(table: dict[str, dict[str, object]]) -> str:
    """The sweep's rows as one markdown table (mean +- std over seeds; edge / inside: the ratio of the means)."""
    lines = [
        "| setting | split | method | k-step error | disturbance RMSE | on the wall | inside | wall / inside |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, entry in table.items():
        cells = [f"{entry[key][0]:.4f} ± {entry[key][1]:.4f}" for key in TEST_KEYS if key != "velocity_rmse"]
        ratio = entry["disturbance_edge_rmse"][0] / entry["disturbance_interior_rmse"][0]
        lines.append("| " + " | ".join([*name.split(" | "), *cells, f"{ratio:.2f}x"]) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--section", choices=["pipeline", "test"], default="pipeline")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="training steps per timing")
    parser.add_argument("--sweep", type=Path, help="test: the multirun directory of a sweep over seeds")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. hardware.batch_size=512")
    args = parser.parse_args()
    if args.section == "test":
        table = test_tables(args.sweep)
        for name, entry in table.items():
            print(name, json.dumps(entry))
        print("\n" + markdown(table))
        return
    cfg = compose_config(["algorithm=dynamics", *args.overrides])
    print(json.dumps(pipeline(cfg, args.repeats, args.steps), indent=2))


if __name__ == "__main__":
    main()
