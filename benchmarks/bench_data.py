"""Benchmark: graph cache (cold build vs warm load), loader throughput, candidate recall.

    .venv/bin/python benchmarks/bench_data.py [--scenes 20000] [--workers 2]

1. Cold build of ``--scenes`` training scenes of 16 UAVs (MILP labels in
   ``--workers`` processes + graphs) vs warm load from the cache (checksum
   verified), and vs rebuilding the graphs alone from the cached scenes.
2. Loader throughput (graphs/s) at the default batch size for the in-memory
   gather loader and PyG's DataLoader (0 and 2 workers) next to the rate a
   ``small``-model training step consumes, all measured in this process.
3. Candidate recall of the default adaptive k at the curriculum sizes
   (4-16 UAVs) and at 16x the training size.

Writes ``data.json`` and ``data.png`` into --out.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from uavgnn.algorithms.scene_policy import batch_imitation_loss  # noqa: E402
from uavgnn.data.cache import BuildSettings, SplitSpec, load_or_build  # noqa: E402
from uavgnn.data.loader import make_loader  # noqa: E402
from uavgnn.infrastructure.storage import write_json
from uavgnn.models import TransformerGNN  # noqa: E402
from uavgnn.problem.graphs import adaptive_k, build_graph, candidate_recall  # noqa: E402
from uavgnn.problem.scenes import SceneDistribution  # noqa: E402
from uavgnn.reporting.tables import format_table  # noqa: E402

DIST = SceneDistribution()
SETTINGS = BuildSettings()


def loader_rate(store, kind: str, batch_size: int, workers: int, batches: int) -> float:
    loader = make_loader(store, kind, batch_size, shuffle=True, num_workers=workers, drop_last=True)
    it = iter(loader)
    next(it)  # worker start-up is not throughput
    start = time.perf_counter()
    n = 0
    for _ in range(batches):
        n += next(it).num_graphs
    return n / (time.perf_counter() - start)


def training_rate(store, batch_size: int, steps: int) -> float:
    model = TransformerGNN(hidden=64, heads=2, layers=2)
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
    batches = [store.gather(torch.randint(0, len(store), (batch_size,))) for _ in range(steps + 3)]
    times = []
    for i, batch in enumerate(batches):
        start = time.perf_counter()
        loss, _, _ = batch_imitation_loss(model, batch, 8)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i >= 3:
            times.append(time.perf_counter() - start)
    return batch_size / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenes", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cache = Path(tempfile.mkdtemp(prefix="uavgnn-bench-cache-"))
    spec = SplitSpec("train", 16, args.scenes, 1_000_016)
    result: dict = {}
    try:
        start = time.perf_counter()
        store = load_or_build(spec, DIST, SETTINGS, cache, workers=args.workers)
        result["cold_build_s"] = time.perf_counter() - start
        warm = []
        for _ in range(3):
            start = time.perf_counter()
            load_or_build(spec, DIST, SETTINGS, cache, workers=args.workers)
            warm.append(time.perf_counter() - start)
        result["warm_load_s"] = statistics.median(warm)
        scenes = store.scenes()
        start = time.perf_counter()
        for scene, label in zip(scenes, store.label_assignments()):
            build_graph(scene, SETTINGS.k_max, SETTINGS.uav_neighbours, label)
        result["graphs_only_s"] = time.perf_counter() - start
        result["cold_over_warm"] = result["cold_build_s"] / result["warm_load_s"]
        result["graphs_over_warm"] = result["graphs_only_s"] / result["warm_load_s"]
        print(format_table([{k: v for k, v in result.items()}]), flush=True)

        rates = {"train_step_small": training_rate(store, args.batch_size, 30)}
        rates["memory"] = loader_rate(store, "memory", args.batch_size, 0, 200)
        rates["pyg_0_workers"] = loader_rate(store, "pyg", args.batch_size, 0, 60)
        rates["pyg_2_workers"] = loader_rate(store, "pyg", args.batch_size, 2, 60)
        result["graphs_per_s"] = rates
        result["loader_over_train"] = {
            k: v / rates["train_step_small"] for k, v in rates.items() if k != "train_step_small"
        }
        print(format_table([{"rate": k, "graphs_per_s": v} for k, v in rates.items()]), flush=True)

        recall = []
        for n_uav, count in ((4, 512), (8, 512), (12, 512), (16, 512), (64, 64), (256, 16)):
            split = load_or_build(
                SplitSpec("val", n_uav, count, 2_000_000 + n_uav), DIST, SETTINGS, cache, workers=args.workers
            )
            graphs = [split.get(i) for i in range(len(split))]
            k = adaptive_k(n_uav, 8, 4, 16)
            recall.append(
                {
                    "n_uav": n_uav,
                    "k": k,
                    "recall": candidate_recall(graphs, k),
                    "recall_k_minus_2": candidate_recall(graphs, max(1, k - 2)),
                }
            )
        result["candidate_recall"] = recall
        print(format_table(recall))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    write_json(args.out / "data.json", result)
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    axes[0].bar(
        ["cold build", "graphs only", "warm load"],
        [result["cold_build_s"], result["graphs_only_s"], result["warm_load_s"]],
        color=["C3", "C1", "C2"],
    )
    axes[0].set(yscale="log", ylabel="seconds", title=f"{args.scenes} scenes of 16 UAVs")
    names = list(result["graphs_per_s"])
    axes[1].bar(names, [result["graphs_per_s"][n] for n in names], color=["C0"] + ["C2"] * (len(names) - 1))
    axes[1].set(yscale="log", ylabel="graphs/s", title=f"loader vs training step (batch {args.batch_size})")
    axes[1].tick_params(axis="x", rotation=20)
    axes[2].plot([r["n_uav"] for r in recall], [100 * r["recall"] for r in recall], marker="o", label="k")
    axes[2].plot(
        [r["n_uav"] for r in recall],
        [100 * r["recall_k_minus_2"] for r in recall],
        marker="o",
        label="k - 2 (jitter low end)",
    )
    axes[2].axhline(99.5, color="gray", ls="--")
    axes[2].set(xscale="log", xlabel="UAVs", ylabel="candidate recall (%)", title="candidate recall of adaptive k")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(args.out / "data.png", dpi=120)
    print(f"wrote {args.out / 'data.json'} and {args.out / 'data.png'}")


if __name__ == "__main__":
    main()
