"""Benchmark: the certified bound (``uavgnn.solvers.bound.scene_bound``) against the scene's size: its time, how
many pricing rounds and added pairs it took, how far it is above the MILP's proven optimum where the MILP finishes
and above min-cost flow's assignment everywhere.

    .venv/bin/python benchmarks/bench_bound.py --sizes 1024 16384 65536 262144 --seeds 3

Per (distribution, N, seed): one generated scene (the eval's density), its bound over each UAV's 16 nearest feasible
targets priced against every pair, and mcf (the relaxation rounded, partial targets dropped) in the same process;
at ``--milp-below`` UAVs or fewer, the MILP too (``--time-limit``). Writes ``bound.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from uavgnn.infrastructure.storage import write_json
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.reporting.tables import format_table
from uavgnn.solvers import solve_mcf, solve_milp
from uavgnn.solvers.bound import scene_bound


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 16384, 65536])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--milp-below", type=int, default=1024)
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=Path("outputs/bench-bound"))
    args = parser.parse_args()
    rows = []
    for positions in ("uniform", "clustered"):
        for n_uav in args.sizes:
            for seed in range(args.seeds):
                scene = generate_scenes(SceneDistribution(positions=positions), n_uav, 1, seed=seed)[0]
                bound = scene_bound(scene)
                mcf = solve_mcf(scene)
                row = {
                    "positions": positions,
                    "n_uav": n_uav,
                    "seed": seed,
                    "bound_s": round(bound.seconds, 3),
                    "certified": bound.certified,
                    "rounds": bound.rounds,
                    "added": bound.added,
                    "mcf_s": round(mcf.wall_time, 3),
                    "mcf_gap": (bound.value - mcf.objective) / abs(bound.value),
                }
                if n_uav <= args.milp_below:
                    milp = solve_milp(scene, time_limit=args.time_limit)
                    row.update(milp_status=milp.status, milp_s=round(milp.wall_time, 2))
                    row["above_optimum"] = (bound.value - milp.objective) / abs(milp.objective)
                rows.append(row)
                print(format_table([row]), flush=True)
    summary = [
        {
            "positions": positions,
            "n_uav": n_uav,
            "bound_s (median)": statistics.median(r["bound_s"] for r in group),
            "certified": f"{sum(r['certified'] for r in group)}/{len(group)}",
            "rounds": max(r["rounds"] for r in group),
            "mcf_gap": statistics.mean(r["mcf_gap"] for r in group),
            **(
                {"above_optimum": max(r["above_optimum"] for r in group)}
                if all("above_optimum" in r for r in group)
                else {}
            ),
        }
        for positions in ("uniform", "clustered")
        for n_uav in args.sizes
        if (group := [r for r in rows if (r["positions"], r["n_uav"]) == (positions, n_uav)])
    ]
    print(format_table(summary))
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "bound.json", {"rows": rows, "summary": summary})


if __name__ == "__main__":
    main()
