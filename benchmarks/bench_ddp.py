"""Benchmark: 2-process DDP (gloo, 1 thread each) vs 1 process (2 threads) on this machine's cores.

    .venv/bin/python benchmarks/bench_ddp.py [--steps 150] [--repeats 3]

Both train the ``small`` model on 16-UAV scenes with the same global batch (64)
and seed, alternating single and DDP runs so machine noise hits both alike.
Reports the median training throughput of each (graphs/s of the whole job,
from ``metrics.jsonl``), the largest relative difference of the logged
training loss between the two, and the final validation metrics of each.
Writes ``ddp.json`` and ``ddp.png`` into --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from uavgnn.infrastructure.storage import write_json
from uavgnn.reporting.tables import format_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def history(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def run(kind: str, run_dir: Path, overrides: list[str]) -> list[dict]:
    if kind == "ddp":
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(ROOT / "run.py"),
            *overrides,
            "hardware.threads=1",
        ]
    else:
        cmd = [sys.executable, str(ROOT / "run.py"), *overrides, "hardware.threads=2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1" if kind == "ddp" else "2"}
    subprocess.run([*cmd, f"hydra.run.dir={run_dir}"], check=True, env=env, capture_output=True, text=True)
    return history(run_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    overrides = [
        "model=small",
        "data.n_uav=16",
        "data.train_scenes=2000",
        "data.val_scenes=128",
        "data.test_scenes=16",
        "hardware.batch_size=64",
        f"train.steps={args.steps}",
        f"train.eval_every={args.steps}",
        f"train.ckpt_every={args.steps}",
        "train.log_every=25",
        "logger=jsonl",
        f"data.cache_dir={args.out / 'ddp-cache'}",
    ]
    rates: dict[str, list[float]] = {"single": [], "ddp": []}
    histories: dict[str, list[dict]] = {}
    for repeat in range(args.repeats):
        for kind in ("single", "ddp"):
            rows = run(kind, args.out / f"ddp-{kind}-{repeat}", overrides)
            rates[kind].append(statistics.median(r["perf/graphs_per_s"] for r in rows if "perf/graphs_per_s" in r))
            histories[kind] = rows
            print(f"repeat {repeat} {kind}: {rates[kind][-1]:.0f} graphs/s", flush=True)
    loss = {kind: [r["train/loss"] for r in rows if "train/loss" in r] for kind, rows in histories.items()}
    final = {kind: next(r for r in reversed(rows) if "val/optimality_gap" in r) for kind, rows in histories.items()}
    result = {
        "graphs_per_s_median": {kind: statistics.median(v) for kind, v in rates.items()},
        "graphs_per_s_runs": rates,
        "ddp_over_single": statistics.median(rates["ddp"]) / statistics.median(rates["single"]),
        "max_rel_loss_diff": max(abs(a - b) / abs(a) for a, b in zip(loss["single"], loss["ddp"])),
        "final_val": {kind: {k: v for k, v in row.items() if k.startswith("val/")} for kind, row in final.items()},
        "steps": args.steps,
    }
    print(
        format_table(
            [
                {
                    "run": kind,
                    "graphs_per_s": result["graphs_per_s_median"][kind],
                    "val_gap": final[kind]["val/optimality_gap"],
                    "val_reward": final[kind]["val/reward"],
                }
                for kind in rates
            ]
        )
    )
    print(
        f"ddp / single throughput: {result['ddp_over_single']:.2f}x; "
        f"max relative train-loss difference: {result['max_rel_loss_diff']:.2e}"
    )
    write_json(args.out / "ddp.json", result)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    axes[0].bar(
        ["1 process x 2 threads", "2 processes x 1 thread"],
        [result["graphs_per_s_median"]["single"], result["graphs_per_s_median"]["ddp"]],
        color=["C0", "C1"],
    )
    axes[0].set(ylabel="graphs/s (median)", title="training throughput, global batch 64")
    steps = [r["step"] for r in histories["single"] if "train/loss" in r]
    axes[1].plot(steps, loss["single"], marker="o", label="1 process")
    axes[1].plot(steps, loss["ddp"], marker="x", ls="--", label="2 processes (DDP, gloo)")
    axes[1].set(xlabel="step", ylabel="train loss", title="same seed, same global batches")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(args.out / "ddp.png", dpi=120)
    print(f"wrote {args.out / 'ddp.json'} and {args.out / 'ddp.png'}")


if __name__ == "__main__":
    main()
