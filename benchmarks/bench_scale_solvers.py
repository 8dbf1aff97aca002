"""Benchmark: the model-guided MILP and the min-cost-flow relaxation on large scenes.

    .venv/bin/python benchmarks/bench_scale_solvers.py --ckpt outputs/bench-model/best.pt \
        [--sizes 16384] [--relaxation-sizes 16384 100000] [--keep 2 3 4] [--time-limit 600]

For each size of ``--sizes`` (one uniform scene each): the full MILP (HiGHS, ``--time-limit``) against
``solver=guided`` (each UAV keeps the checkpoint's ``--keep`` most likely targets and the min-cost-flow
relaxation's pair; HiGHS solves that reduced MILP),
``mcf``, ``lap`` and ``greedy``: objective, gap to the full MILP (only when it proved optimality), an upper
bound on the true gap (against the smaller of the MILP's dual bound and the linear relaxation) and wall
time. For each size of ``--relaxation-sizes``: ``mcf`` and ``greedy`` against the full linear relaxation
(``relaxed_assignment`` with every feasible pair, an upper bound on the optimum), so the gap printed there
is an upper bound on the true gap. Writes ``scale_solvers.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.inference.guided import solve_guided
from uavgnn.infrastructure.errors import ProblemTooLarge
from uavgnn.infrastructure.storage import write_json
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.scenes import Scene, SceneDistribution
from uavgnn.reporting.tables import format_table
from uavgnn.solvers import solve, solve_milp
from uavgnn.solvers.min_cost_flow import relaxed_assignment


def relaxation_bound(scene: Scene) -> tuple[float, float]:
    """(the linear relaxation's optimum, seconds): every feasible pair, no partial targets dropped."""
    start = time.perf_counter()
    relaxed = relaxed_assignment(scene, k=10**9)
    taken = relaxed >= 0
    dist = ((scene.uav_pos[taken] - scene.target_pos[relaxed[taken]]) ** 2).sum(1) ** 0.5
    value = scene.value[relaxed[taken]] / scene.need[relaxed[taken]] - scene.lam * dist
    return float(value.sum()), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16384])
    parser.add_argument("--relaxation-sizes", type=int, nargs="+", default=[16384, 100000])
    parser.add_argument("--keep", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--time-limit", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks"))
    args = parser.parse_args()
    model, graph, _ = load_policy(args.ckpt)
    rows = []
    for n_uav in args.sizes:
        scene = generate_scenes(SceneDistribution(), n_uav, 1, args.seed)[0]
        full = solve_milp(scene, time_limit=args.time_limit)
        print(f"{n_uav} UAVs: full MILP {full.objective:.3f} ({full.status}) in {full.wall_time:.1f} s", flush=True)
        results = [(full, "")]
        for keep in args.keep:
            guided, timing = solve_guided(model, scene, graph, keep, args.time_limit)
            results.append(
                (
                    guided,
                    f"keep {keep}: {int(timing['pairs']):,} pairs; model {timing['model_s']:.1f} s"
                    f" + relaxation {timing['relaxation_s']:.1f} s + MILP {timing['milp_s']:.1f} s",
                )
            )
        for name in ("mcf", "lap", "greedy"):
            try:
                results.append((solve(scene, name), ""))
            except ProblemTooLarge as err:
                print(f"{name}: {err}")
        bound = min(relaxation_bound(scene)[0], full.bound if full.bound is not None else float("inf"))
        for result, note in results:
            gap = (full.objective - result.objective) / abs(full.objective) if full.is_optimal else None
            rows.append(
                {
                    "n_uav": n_uav,
                    "solver": result.solver,
                    "status": result.status,
                    "objective": result.objective,
                    "gap": gap,
                    "gap_upper_bound": (bound - result.objective) / bound,
                    "time_s": result.wall_time,
                    "time_vs_milp": result.wall_time / full.wall_time,
                    "note": note,
                }
            )
            print(
                f"  {result.solver}: gap {gap if gap is None else f'{100 * gap:.3f}%'} "
                f"in {result.wall_time:.2f} s {note}",
                flush=True,
            )
    relaxation = []
    for n_uav in args.relaxation_sizes:
        scene = generate_scenes(SceneDistribution(), n_uav, 1, args.seed)[0]
        bound, bound_s = relaxation_bound(scene)
        for name in ("mcf", "greedy"):
            result = solve(scene, name)
            relaxation.append(
                {
                    "n_uav": n_uav,
                    "solver": name,
                    "objective": result.objective,
                    "gap_upper_bound": (bound - result.objective) / abs(bound),
                    "time_s": result.wall_time,
                    "relaxation": bound,
                    "relaxation_s": bound_s,
                }
            )
            print(
                f"{n_uav} UAVs: {name} {result.objective:.1f} in {result.wall_time:.2f} s, gap <= "
                f"{100 * relaxation[-1]['gap_upper_bound']:.3f}% (relaxation {bound:.1f})",
                flush=True,
            )
    print(format_table(rows))
    print(format_table(relaxation))
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "scale_solvers.json", {"against_milp": rows, "against_relaxation": relaxation})


if __name__ == "__main__":
    main()
