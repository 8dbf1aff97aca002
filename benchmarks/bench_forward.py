"""Benchmark: the forward pass on one huge scene, fp32 vs bf16 autocast, and where its time goes.

    .venv/bin/python benchmarks/bench_forward.py [--nodes 100000] [--ckpt outputs/bench-model/best.pt] \
        [--blocks 8192 65536 1048576] [--spatial-order]

Runs ``TransformerGNN.forward_chunked`` (layer-wise, bounded memory) on one
uniform scene of ``--nodes`` nodes at k = 16, in fp32 and under bf16 autocast
(median of ``--repeats`` after one warm-up pass) for every block size of ``--blocks`` (message edges per
layer-wise block), on the scene as generated or in Morton order (``--spatial-order``, as ``solve_with_model``
orders scenes of 10,000 UAVs and more), then prints the PyTorch profiler's top operators of
one fp32 pass. Without ``--ckpt`` the ``small`` model is freshly initialised
(timings do not depend on the weights).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch_geometric.data import Batch

from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.inference.scene import CHUNK_EDGES, spatial_order
from uavgnn.models import TransformerGNN
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.graphs import build_graph, message_edges
from uavgnn.problem.scenes import SceneDistribution


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--ckpt", default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--blocks", type=int, nargs="+", default=[CHUNK_EDGES])
    parser.add_argument("--spatial-order", action="store_true")
    args = parser.parse_args()
    model = load_policy(args.ckpt)[0] if args.ckpt else TransformerGNN(64, 2, 2).eval()
    dist = SceneDistribution()
    scene = generate_scenes(dist, round(args.nodes / (1 + dist.target_ratio)), 1, 5)[0]
    if args.spatial_order:
        scene = spatial_order(scene)[0]
    batch = Batch.from_data_list([build_graph(scene)])
    edge_index, edge_attr, keep, _ = message_edges(batch, 16)
    inputs = (batch.x, batch.node_type, edge_index, edge_attr, batch.cand_index[:, keep], batch.cand_attr[keep])
    print(
        f"{scene.n_uav + scene.n_target} nodes, {edge_index.shape[1]:,} message edges, {int(keep.sum()):,} candidates"
    )
    model.forward_chunked(*inputs, max_edges=args.blocks[0])  # warm-up: first-touch allocations are not the cost
    for block in args.blocks:
        times = {}
        for name, dtype in (("fp32", None), ("bf16", torch.bfloat16)):
            runs = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
                    model.forward_chunked(*inputs, max_edges=block)
                runs.append(time.perf_counter() - start)
            times[name] = statistics.median(runs)
            print(f"blocks of {block:,} edges, {name}: {times[name]:.2f} s (median of {args.repeats})")
        print(f"blocks of {block:,} edges: bf16 speed-up {times['fp32'] / times['bf16']:.2f}x")
    with torch.profiler.profile() as prof:
        model.forward_chunked(*inputs, max_edges=args.blocks[0])
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))


if __name__ == "__main__":
    main()
