"""Benchmark: CBBA (``uavgnn.envs.cbba``) on the static assignment problem against the MILP's proven optimum, beside
the greedy solver, at swarm sizes the MILP solves: its gap, rounds, messages and time.

    .venv/bin/python benchmarks/bench_cbba.py --sizes 16 64 256 --scenes 32

Per (distribution, N): ``--scenes`` generated scenes (the eval's density), solved by the MILP (``--time-limit``) and
by the greedy solver one at a time, and by CBBA in one batch twice: every UAV hearing every other (the MILP's full
information) and each hearing its ``--obs-uavs`` nearest (the swarm environment's links, ``env.obs_uavs``). The gap
is ``(J* - J) / |J*|`` per scene. Writes ``cbba.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from uavgnn.envs.cbba import allocate, scene_auction
from uavgnn.infrastructure.storage import write_json
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.metrics import reward
from uavgnn.problem.scenes import Scene, SceneDistribution
from uavgnn.reporting.tables import format_table
from uavgnn.solvers import solve_greedy, solve_milp


def cbba_rows(scenes: list[Scene], optimum: list[float], obs_uavs: int | None) -> dict[str, float]:
    """CBBA on every scene in one batch: mean and std of its gap, its rounds and messages per UAV, time, and how
    many scenes the round cap cut short."""
    start = time.perf_counter()
    out = allocate(scene_auction(scenes, obs_uavs), max_rounds=4 * scenes[0].n_uav)
    seconds = time.perf_counter() - start
    gaps = [(j - reward(s, a.numpy())) / abs(j) for s, a, j in zip(scenes, out.target, optimum)]
    return {
        "gap": statistics.mean(gaps),
        "gap_std": statistics.stdev(gaps),
        "rounds": float(out.rounds.float().mean()),
        "messages_per_uav": float(out.messages.float().mean()) / scenes[0].n_uav,
        "s_per_scene": seconds / len(scenes),
        "capped": int(out.capped.sum()),  # scenes whose auction the round cap cut short
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--scenes", type=int, default=32)
    parser.add_argument("--obs-uavs", type=int, default=4)
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=Path("outputs/bench-cbba"))
    args = parser.parse_args()
    rows = []
    for positions in ("uniform", "clustered"):
        for n_uav in args.sizes:
            scenes = generate_scenes(SceneDistribution(positions=positions), n_uav, args.scenes, seed=n_uav)
            milp = [solve_milp(scene, time_limit=args.time_limit) for scene in scenes]
            optimum = [m.objective for m in milp]
            greedy = [solve_greedy(scene) for scene in scenes]
            greedy_gaps = [(j - g.objective) / abs(j) for g, j in zip(greedy, optimum)]
            base = {"positions": positions, "n_uav": n_uav, "scenes": len(scenes)}
            row = {
                **base,
                "milp_optimal": f"{sum(m.status == 'optimal' for m in milp)}/{len(milp)}",
                "milp_s": float(np.median([m.wall_time for m in milp])),
                "greedy_gap": statistics.mean(greedy_gaps),
                "greedy_s": float(np.median([g.wall_time for g in greedy])),
            }
            for label, obs_uavs in (("cbba_all", None), (f"cbba_{args.obs_uavs}nn", args.obs_uavs)):
                row.update({f"{label}_{k}": v for k, v in cbba_rows(scenes, optimum, obs_uavs).items()})
            rows.append(row)
            print(format_table([row]), flush=True)
    print(format_table(rows, ["positions", "n_uav", "greedy_gap", "cbba_all_gap", f"cbba_{args.obs_uavs}nn_gap"]))
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "cbba.json", {"rows": rows, "threads": torch.get_num_threads()})


if __name__ == "__main__":
    main()
