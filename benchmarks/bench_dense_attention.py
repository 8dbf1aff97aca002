"""The TransformerGNN's dense attention path (``optim.dense_max_nodes``) against PyG's sparse path, by scene size.

    .venv/bin/python benchmarks/bench_dense_attention.py                  # CPU
    .venv/bin/python benchmarks/bench_dense_attention.py --device cuda    # a GPU

Padded fresh-scene batches (``build_graph_batch``, k = 8) of 8 to 256 UAVs and ``model=small``: for each path the
median time of a forward + backward of the policy's log-probabilities, its aten ops and host-sync ops, and the
dense path's pair grid (graphs x nodes^2 x (edge features + mask)), what grows with the square of the scene.
(That the two paths agree is tested: ``tests/models/test_dense_attention.py``, fp64, 1e-10.)
"""

from __future__ import annotations

import argparse

import torch

from uavgnn.infrastructure.perf import OpCounter, median_seconds
from uavgnn.models import TransformerGNN
from uavgnn.models.policy import policy_log_probs
from uavgnn.problem.graphs import EDGE_DIM, build_graph_batch
from uavgnn.problem.scene_batch import SceneDistribution, generate_scene_batch
from uavgnn.reporting.tables import format_table

K = 8


def step(model: TransformerGNN, batch, dense_max_nodes: int) -> None:
    cand_logp, idle_logp, _ = policy_log_probs(model, batch, K, dense_max_nodes=dense_max_nodes)
    (torch.where(torch.isfinite(cand_logp), cand_logp, 0.0).sum() + idle_logp.sum()).backward()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    device, gen = torch.device(args.device), torch.Generator(args.device).manual_seed(0)
    torch.manual_seed(0)
    model = TransformerGNN(hidden=64, heads=2, layers=2).to(device)
    rows = []
    for n_uav, scenes in ((8, 64), (16, 64), (64, 16), (128, 8), (256, 4)):
        batch = build_graph_batch(generate_scene_batch(SceneDistribution(), n_uav, scenes, gen, device), 16, 8)
        row = {"UAVs x scenes": f"{n_uav} x {scenes}", "nodes": batch.max_nodes}
        for name, limit in (("sparse", 0), ("dense", batch.max_nodes)):
            row[f"{name} ms"] = round(1e3 * median_seconds(lambda: step(model, batch, limit), args.repeats, device), 2)
            with OpCounter() as count:
                step(model, batch, limit)
            row[f"{name} ops, syncs"] = f"{count.ops}, {count.syncs}"
        row["pair grid MB"] = round(scenes * batch.max_nodes**2 * (EDGE_DIM * 4 + 1) / 2**20, 1)
        rows.append(row)
    print(format_table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
