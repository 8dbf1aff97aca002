"""Benchmark: the forward pass on one huge scene, fp32 vs bf16 autocast, and where its time goes.

    .venv/bin/python benchmarks/bench_forward.py [--nodes 100000] [--ckpt outputs/bench-model/best.pt]

Runs ``TransformerGNN.forward_chunked`` (layer-wise, bounded memory) on one
uniform scene of ``--nodes`` nodes at k = 16, in fp32 and under bf16 autocast
(median of ``--repeats`` after one warm-up pass), then prints the PyTorch profiler's top operators of
one fp32 pass. Without ``--ckpt`` the ``small`` model is freshly initialised
(timings do not depend on the weights).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch_geometric.data import Batch

from uavgnn.models import TransformerGNN
from uavgnn.problem.graphs import build_graph, message_edges
from uavgnn.problem.scenes import SceneDistribution, generate_scenes
from uavgnn.training.checkpoint import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--ckpt", default=None)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = load_model(args.ckpt)[0] if args.ckpt else TransformerGNN(64, 2, 2).eval()
    dist = SceneDistribution()
    scene = generate_scenes(dist, round(args.nodes / (1 + dist.target_ratio)), 1, 5)[0]
    batch = Batch.from_data_list([build_graph(scene)])
    edge_index, edge_attr, keep = message_edges(batch, 16)
    inputs = (batch.x, batch.node_type, edge_index, edge_attr, batch.cand_index[:, keep], batch.cand_attr[keep])
    print(f"{scene.n_uav + scene.n_target} nodes, {edge_index.shape[1]:,} message edges, {int(keep.sum()):,} candidates")
    model.forward_chunked(*inputs)  # warm-up: first-touch allocations are not the forward's cost
    times = {}
    for name, dtype in (("fp32", None), ("bf16", torch.bfloat16)):
        runs = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
                model.forward_chunked(*inputs)
            runs.append(time.perf_counter() - start)
        times[name] = statistics.median(runs)
        print(f"{name}: {times[name]:.2f} s (median of {args.repeats})")
    print(f"bf16 speed-up: {times['fp32'] / times['bf16']:.2f}x")
    with torch.profiler.profile() as prof:
        model.forward_chunked(*inputs)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))


if __name__ == "__main__":
    main()
