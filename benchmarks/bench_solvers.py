"""Benchmark: MILP, greedy and lap solve time and optimality gap vs scene size.

    .venv/bin/python benchmarks/bench_solvers.py [--sizes 16 64 256 1024 4096] [--time-limit 150]

Per (distribution, N): median wall time of each solver over the scenes of that
size and the mean gap of greedy/lap against the MILP's objective (with the
MILP status, since a time-limited MILP is only a lower bound on J*). Writes
``solvers.json`` and ``solvers.png`` into --out.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from uavgnn.infrastructure.storage import write_json
from uavgnn.problem.generator import generate_scenes  # noqa: E402
from uavgnn.problem.scenes import SceneDistribution  # noqa: E402
from uavgnn.reporting.tables import format_table  # noqa: E402
from uavgnn.solvers import ProblemTooLarge, solve  # noqa: E402

SCENES_PER_SIZE = {16: 20, 64: 10, 256: 5, 1024: 3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 64, 256, 1024, 4096])
    parser.add_argument("--time-limit", type=float, default=150.0)
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    generation = []
    for _ in range(5):
        start = time.perf_counter()
        generate_scenes(SceneDistribution(), 16, 10_000, seed=0)
        generation.append(time.perf_counter() - start)
    print(f"generate 10,000 scenes of 16 UAVs: {statistics.median(generation):.3f} s (median of 5)")
    rows = []
    for positions in ("uniform", "clustered"):
        for n in args.sizes:
            scenes = generate_scenes(SceneDistribution(positions=positions), n, SCENES_PER_SIZE.get(n, 1), seed=n)
            times: dict[str, list[float]] = {"milp": [], "greedy": [], "lap": []}
            gaps: dict[str, list[float]] = {"greedy": [], "lap": []}
            statuses = []
            for scene in scenes:
                best = solve(scene, "milp", time_limit=args.time_limit)
                times["milp"].append(best.wall_time)
                statuses.append(best.status)
                for name in gaps:
                    try:
                        result = solve(scene, name)
                    except ProblemTooLarge:
                        continue
                    times[name].append(result.wall_time)
                    gaps[name].append((best.objective - result.objective) / abs(best.objective))
            row = {
                "positions": positions,
                "n_uav": n,
                "scenes": len(scenes),
                "milp_status": ",".join(sorted(set(statuses))),
            }
            for name, values in times.items():
                row[f"{name}_s"] = statistics.median(values) if values else float("nan")
            for name, values in gaps.items():
                row[f"{name}_gap"] = statistics.fmean(values) if values else float("nan")
            rows.append(row)
            print(format_table([row]), flush=True)
    print(format_table(rows))
    write_json(args.out / "solvers.json", {"generate_10k_scenes_s": statistics.median(generation), "solvers": rows})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for positions, style in (("uniform", "-"), ("clustered", "--")):
        sel = [r for r in rows if r["positions"] == positions]
        ns = [r["n_uav"] for r in sel]
        for name in ("milp", "greedy", "lap"):
            axes[0].loglog(ns, [r[f"{name}_s"] for r in sel], style, marker="o", label=f"{name} ({positions})")
        for name in ("greedy", "lap"):
            axes[1].semilogx(
                ns, [100 * r[f"{name}_gap"] for r in sel], style, marker="o", label=f"{name} ({positions})"
            )
    axes[0].set(xlabel="UAVs", ylabel="median solve time (s)", title="solve time")
    axes[1].set(xlabel="UAVs", ylabel="gap to MILP (%)", title="optimality gap of baselines")
    for ax in axes:
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out / "solvers.png", dpi=120)
    print(f"wrote {args.out / 'solvers.json'} and {args.out / 'solvers.png'}")


if __name__ == "__main__":
    main()
