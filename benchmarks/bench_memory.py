"""The memory estimate of scoring a scene with the model (``inference.scene.scoring_bytes``) against what it
takes: ``solve_with_model`` on one uniform scene per size, each in a fresh process, its peak resident memory
(``VmHWM``, reset just before by ``/proc/self/clear_refs``) over the memory it held before.

    .venv/bin/python benchmarks/bench_memory.py --sizes 16384 65536 262144

Prints per size the measured peak, the estimate and their ratio; the estimate must not be below what is
measured (a refusal that comes too late is no refusal), and the marginal cost per UAV is the slope between sizes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, sys, torch
from pathlib import Path
from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.inference.scene import scoring_bytes, solve_with_model
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.scenes import SceneDistribution

def status(key):
    lines = Path("/proc/self/status").read_text().splitlines()
    return int(next(line for line in lines if line.startswith(key)).split()[1]) * 1024

torch.set_num_threads(1)
n = int(sys.argv[1])
model, graph, _ = load_policy("pretrained", torch.device("cpu"), "bench_memory")
scene = generate_scenes(SceneDistribution(), n, 1, seed=1)[0]
Path('/proc/self/clear_refs').write_text('5')  # the peak starts again from here
base = status('VmRSS:')
solve_with_model(model, scene, graph)
print(json.dumps({"n_uav": n, "measured": status('VmHWM:') - base, "estimate": scoring_bytes(model, n, graph.k(n))}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16384, 65536, 262144])
    args = parser.parse_args()
    rows = []
    for n in args.sizes:
        out = subprocess.run(
            [sys.executable, "-c", PROBE, str(n)], cwd=ROOT, capture_output=True, text=True, check=True
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        row = rows[-1]
        print(
            f"{n:>9,} UAVs: measured {row['measured'] / 2**20:8.0f} MB ({row['measured'] / n / 1024:5.1f} KB a UAV), "
            f"estimate {row['estimate'] / 2**20:8.0f} MB, estimate / measured {row['estimate'] / row['measured']:.2f}",
            flush=True,
        )
    for a, b in zip(rows, rows[1:]):
        slope = (b["measured"] - a["measured"]) / (b["n_uav"] - a["n_uav"])
        print(f"marginal {a['n_uav']:,} -> {b['n_uav']:,} UAVs: {slope / 1024:.1f} KB a UAV")


if __name__ == "__main__":
    main()
