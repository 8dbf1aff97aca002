"""Benchmark: curriculum batch policies, ``by_scale`` vs ``nodes``, in UAV decisions trained per second.

    .venv/bin/python benchmarks/bench_curriculum_batch.py [--steps 20] [--repeats 3]

For each curriculum stage size (4, 8, 12, 16 UAVs) trains the ``small`` model
for ``--steps`` steps at the batch each policy gives (``by_scale``: the
original guide's table; ``nodes``: 1,536 nodes per batch) and reports the
median step time, graphs/s and UAVs/s (every UAV is one decision of the
imitation loss), alternating the policies in every repeat.
Writes ``curriculum_batch.json`` into --out.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch

from uavgnn.data.cache import BuildSettings, SplitSpec, load_or_build
from uavgnn.data.stages import stage_batch_size
from uavgnn.infrastructure.storage import write_json
from uavgnn.models import TransformerGNN
from uavgnn.modes.benchmark import random_batches, timed_steps
from uavgnn.problem.graphs import adaptive_k
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.reporting.tables import format_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--node-budget", type=int, default=1536)
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dist = SceneDistribution()
    rows = []
    with tempfile.TemporaryDirectory(prefix="uavgnn-bench-") as cache:
        for n_uav in (4, 8, 12, 16):
            store = load_or_build(
                SplitSpec("train", n_uav, 512, 1_000_000 + n_uav), dist, BuildSettings(), Path(cache), workers=2
            )
            nodes = n_uav + dist.n_targets(n_uav)
            k = adaptive_k(n_uav, 8, 4, 16)
            runs: dict[str, list[dict]] = {"by_scale": [], "nodes": []}
            for _ in range(args.repeats):
                for policy in runs:
                    size = stage_batch_size(policy, nodes, 64, args.node_budget)
                    torch.manual_seed(0)
                    runs[policy].append(
                        {
                            "batch": size,
                            **timed_steps(
                                TransformerGNN(64, 2, 2),
                                random_batches(store, size),
                                args.steps,
                                k,
                                torch.device("cpu"),
                            ),
                        }
                    )
            for policy, results in runs.items():
                step_ms = statistics.median(r["step_ms"] for r in results)
                batch = results[0]["batch"]
                rows.append(
                    {
                        "n_uav": n_uav,
                        "policy": policy,
                        "batch": batch,
                        "step_ms": step_ms,
                        "graphs_per_s": 1000 * batch / step_ms,
                        "uavs_per_s": 1000 * batch * n_uav / step_ms,
                    }
                )
            print(format_table(rows[-2:]), flush=True)
    print(format_table(rows))
    write_json(args.out / "curriculum_batch.json", rows)


if __name__ == "__main__":
    main()
