"""What deciding one huge scene with the model costs: time (graph with the relaxation, forward, decision) and peak
memory, scored whole or in tiles, against the memory estimate (``inference.scene.scoring_bytes``).
``solve_with_model`` on one uniform scene per size, each repeat in a fresh process, its peak resident memory
(``VmHWM``, reset just before by ``/proc/self/clear_refs``) over the memory it held before.

    .venv/bin/python benchmarks/bench_memory.py --sizes 16384 65536 262144 --whole       # the estimate, whole scenes
    .venv/bin/python benchmarks/bench_memory.py --sizes 262144 1048576 --repeats 3        # in tiles (the default)

Prints per size the medians of the repeats (time split, peak), the estimate and their ratio; the estimate must
not be below what is measured (a refusal that comes too late is no refusal), and the marginal cost per UAV is the
slope between sizes. ``--threads``: torch threads (the machine's 2 by default).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, sys, time, torch
from pathlib import Path
from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.inference.scene import TILE_UAVS, scoring_bytes, solve_with_model
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.scenes import SceneDistribution

def status(key):
    lines = Path("/proc/self/status").read_text().splitlines()
    return int(next(line for line in lines if line.startswith(key)).split()[1]) * 1024

n, whole, threads = int(sys.argv[1]), sys.argv[2] == "whole", int(sys.argv[3])
torch.set_num_threads(threads)
tile_uavs = n if whole else TILE_UAVS
model, graph, _ = load_policy("pretrained", torch.device("cpu"), "bench_memory")
scene = generate_scenes(SceneDistribution(), n, 1, seed=1)[0]
Path('/proc/self/clear_refs').write_text('5')  # the peak starts again from here
base = status('VmRSS:')
start = time.perf_counter()
result, split = solve_with_model(model, scene, graph, tile_uavs=tile_uavs)
print(json.dumps({
    "n_uav": n, "seconds": time.perf_counter() - start, **split, "measured": status('VmHWM:') - base,
    "estimate": scoring_bytes(model, n, graph.k(n), None if whole or n <= tile_uavs else tile_uavs),
    "objective": result.objective,
}))
"""


def measure(n: int, whole: bool, threads: int, repeats: int) -> dict:
    """The medians over ``repeats`` fresh processes of one size (the objective: the same every time)."""
    runs = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", PROBE, str(n), "whole" if whole else "tiles", str(threads)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    row = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    return row | {"objective": runs[0]["objective"], "repeats": repeats}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16384, 65536, 262144])
    parser.add_argument("--whole", action="store_true", help="score every scene whole (no tiles)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="write the rows to this JSON file")
    args = parser.parse_args()
    rows = []
    for n in args.sizes:
        row = measure(n, args.whole, args.threads, args.repeats)
        rows.append(row)
        print(
            f"{n:>9,} UAVs: {row['seconds']:7.1f} s (graph + relaxation {row['build_s']:.1f}, forward "
            f"{row['forward_s']:.1f}, decision {row['decode_s']:.1f}), peak {row['measured'] / 2**20:6.0f} MB "
            f"({row['measured'] / n / 1024:4.1f} KB a UAV), estimate {row['estimate'] / 2**20:6.0f} MB "
            f"(x{row['estimate'] / row['measured']:.2f}), objective {row['objective']:,.1f}",
            flush=True,
        )
    for a, b in zip(rows, rows[1:]):
        slope = (b["measured"] - a["measured"]) / (b["n_uav"] - a["n_uav"])
        print(f"marginal {a['n_uav']:,} -> {b['n_uav']:,} UAVs: {slope / 1024:.1f} KB a UAV")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
