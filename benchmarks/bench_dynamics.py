"""The dynamics model's data pipeline (normalised once vs reference/004's per-sample normalisation), and the
test tables of runs over seeds (the TCN and the learned filter against the filters, estimated and tuned: every
horizon, the velocity, the disturbance and NEES, mean [95% interval] over the seeds; each model over the tuned
EKF, seed by seed; the error against the steps ahead as a picture).

    .venv/bin/python benchmarks/bench_dynamics.py --section pipeline
    for s in 0 1 2; do for m in tcn learned_filter; do .venv/bin/python run.py algorithm=dynamics model=$m \\
        logger=jsonl seed=$s hydra.run.dir=multirun/dynamics-filters/$m-s$s; done; done
    .venv/bin/python benchmarks/bench_dynamics.py --section test --sweep multirun/dynamics-filters \\
        --picture docs/dynamics_steps_ahead.png

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
from uavgnn.reporting.intervals import mean_interval


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


HORIZON_KEYS = ("velocity_rmse", "disturbance_rmse", "nees", "nees_in_95")  # after the step_j_rmse columns
MODELS = ("tcn", "learned_filter")  # the rows a run's model gives; the others (the filters) are the same in every run
YARDSTICK = "ekf_tuned"  # what the models' ratios are against


def seed_rows(sweep: Path) -> dict[tuple[str, str], list[dict]]:
    """(split, method) -> one row per seed: each model's rows from its own runs, the baselines' from the runs of
    the first model found (a seed's baselines are the same in every run of that seed: same windows, same cached
    tuning)."""
    runs: dict[str, dict[int, dict]] = {}
    for summary in sorted(sweep.glob("*/summary.json")):
        config = yaml.safe_load((summary.parent / ".hydra" / "config.yaml").read_text())
        runs.setdefault(config["model"]["name"], {})[config["seed"]] = json.loads(summary.read_text())
    first = next(iter(runs.values()))
    table: dict[tuple[str, str], list[dict]] = {}
    for model, by_seed in runs.items():
        for seed in sorted(by_seed):
            for row in by_seed[seed]["test"]:
                is_model = row["method"] in MODELS
                if (is_model and row["method"] == model) or (not is_model and by_seed is first):
                    table.setdefault((row["split"], row["method"]), []).append(row)
    splits = list(dict.fromkeys(split for split, _ in table))
    methods = sorted(dict.fromkeys(method for _, method in table), key=lambda m: m not in MODELS)  # models first
    return {(split, method): table[split, method] for split in splits for method in methods if (split, method) in table}


def interval_cell(values: list[float], digits: int = 4) -> str:
    """mean [low, high] (95%, Student's t over the seeds), or the mean alone of one seed."""
    got = mean_interval(values)
    mean = statistics.mean(values)
    return f"{mean:.{digits}f}" if got is None else f"{mean:.{digits}f} [{got.low:.{digits}f}, {got.high:.{digits}f}]"


def horizon_table(table: dict[tuple[str, str], list[dict]]) -> str:
    """Every method's error at every horizon, its velocity and disturbance errors and NEES, on each split."""
    steps = sorted((k for k in next(iter(table.values()))[0] if k.startswith("step_")), key=lambda k: int(k[5:-5]))
    keys = [*steps, *HORIZON_KEYS]
    lines = ["| split | method | seeds | " + " | ".join(keys) + " |", "|---|---|---|" + "---|" * len(keys)]
    for (split, method), rows in table.items():
        cells = [
            interval_cell([r[k] for r in rows], 3 if k.startswith("nees") else 4) if k in rows[0] else "-" for k in keys
        ]
        lines.append(f"| {split} | {method} | {len(rows)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio_table(table: dict[tuple[str, str], list[dict]]) -> str:
    """Each model's error over the tuned EKF's, seed by seed on the same windows (mean [95%]), at every horizon
    and for the disturbance."""
    splits = list(dict.fromkeys(split for split, _ in table))
    steps = sorted((k for k in next(iter(table.values()))[0] if k.startswith("step_")), key=lambda k: int(k[5:-5]))
    keys = [*steps, "disturbance_rmse"]
    lines = ["| split | model / " + YARDSTICK + " | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
    for split in splits:
        for model in MODELS:
            if (split, model) not in table:
                continue
            pairs = list(zip(table[split, model], table[split, YARDSTICK]))
            cells = [interval_cell([m[k] / y[k] for m, y in pairs], 3) for k in keys]
            lines.append(f"| {split} | {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_horizons(table: dict[tuple[str, str], list[dict]], path: Path) -> Path:
    """Error against the steps ahead, mean over the seeds with its 95% interval, one panel per test split."""
    from uavgnn.infrastructure.storage import pyplot, save_figure
    from uavgnn.reporting.dynamics_pictures import log_error_axis

    plt = pyplot()
    splits = list(dict.fromkeys(split for split, _ in table))
    fig, axes = plt.subplots(1, len(splits), figsize=(6.9, 3.4), squeeze=False, sharey=True)
    for ax, split in zip(axes[0], splits):
        methods = [method for s, method in table if s == split]
        for i, method in enumerate(methods):
            rows = table[split, method]
            steps = sorted((k for k in rows[0] if k.startswith("step_")), key=lambda k: int(k[5:-5]))
            means = [statistics.mean(r[k] for r in rows) for k in steps]
            spans = [mean_interval([r[k] for r in rows]) for k in steps]
            low = [m - (g.low if g else m) for m, g in zip(means, spans)]
            high = [(g.high if g else m) - m for m, g in zip(means, spans)]
            style = "--" if method.endswith("_estimated") else "-"
            x = [j + 1 + 0.04 * (i - len(methods) / 2) for j in range(len(steps))]  # side by side at each horizon
            ax.errorbar(
                x,
                means,
                yerr=[low, high],
                fmt=style,
                marker="osD^v<"[i % 6],
                ms=4,
                lw=1,
                capsize=2,
                c=f"C{i}",
                label=method,
            )
        ax.set(xlabel="steps ahead", title=split, xticks=range(1, len(steps) + 1))
        log_error_axis(ax)
    axes[0, 0].set_ylabel("position RMSE (world units, log scale)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    save_figure(fig, path, dpi=150)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--section", choices=["pipeline", "test"], default="pipeline")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="training steps per timing")
    parser.add_argument("--sweep", type=Path, help="test: the folder of the runs (a sweep over seeds and models)")
    parser.add_argument("--picture", type=Path, help="test: where to draw the error against the steps ahead")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. hardware.batch_size=512")
    args = parser.parse_args()
    if args.section == "test":
        table = seed_rows(args.sweep)
        print(horizon_table(table) + "\n\n" + ratio_table(table))
        if args.picture:
            print(f"\n{plot_horizons(table, args.picture)}")
        return
    cfg = compose_config(["algorithm=dynamics", *args.overrides])
    print(json.dumps(pipeline(cfg, args.repeats, args.steps), indent=2))


if __name__ == "__main__":
    main()
