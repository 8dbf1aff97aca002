"""Benchmark: device-generated training batches, the training step on them, huge-scene neighbours.

    .venv/bin/python benchmarks/bench_fresh_scenes.py [--device cpu|cuda] [--sections fresh,step,neighbours]

- ``fresh``: graphs/s of ``generate_scene_batch`` + ``build_graph_batch`` (one batch of B scenes of N UAVs
  on the device, no loop over scenes) for every B in ``--batches`` and N in ``--sizes``; side by side at
  B = 1,024, N = 16: the per-scene path the cache uses (numpy generator, one k-d tree graph per scene,
  PyG collation).
- ``step``: graphs/s of whole REINFORCE training steps of the ``small`` model (8 rollouts, AdamW) at each
  batch size of ``--step-batches``: on batches already on the device (``resident``: what a cached split on
  the device gives) and on batches generated inside the step (``fresh``: ``data.source=generated``);
  ``--compile`` adds ``torch.compile`` columns.
- ``neighbours``: one uniform scene of ``--nodes`` nodes: k-d tree (CPU) vs the torch cell grid
  (``grid_neighbours``) on ``--device``.

Medians of ``--repeats``; every comparison runs side by side in this process. Writes
``fresh_scenes.json`` and ``fresh_scenes.png`` (graphs/s vs batch size) into ``--out``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from torch_geometric.data import Batch  # noqa: E402

from uavgnn.algorithms.checkpoint_config import default_config  # noqa: E402
from uavgnn.algorithms.reinforce import Reinforce  # noqa: E402
from uavgnn.infrastructure.device import maybe_compile  # noqa: E402
from uavgnn.infrastructure.perf import median_seconds  # noqa: E402
from uavgnn.infrastructure.storage import write_json
from uavgnn.models import TransformerGNN  # noqa: E402
from uavgnn.problem.generator import generate_scenes  # noqa: E402
from uavgnn.problem.graphs import build_graph, build_graph_batch  # noqa: E402
from uavgnn.problem.neighbours import grid_neighbours, kdtree_neighbours  # noqa: E402
from uavgnn.problem.scene_batch import SceneBatch, generate_scene_batch  # noqa: E402
from uavgnn.problem.scenes import SceneDistribution  # noqa: E402
from uavgnn.reporting.tables import format_table  # noqa: E402

DIST = SceneDistribution()
K_MAX, UAV_NEIGHBOURS, K = 16, 8, 8  # the default data settings (k = 8 at 16 UAVs)


def fresh_batch(n_uav: int, count: int, generator: torch.Generator, device: torch.device) -> Batch:
    return build_graph_batch(generate_scene_batch(DIST, n_uav, count, generator, device), K_MAX, UAV_NEIGHBOURS)


def bench_fresh(args, device: torch.device) -> list[dict]:
    rows = []
    generator = torch.Generator(device=device).manual_seed(0)
    for n_uav in args.sizes:
        for count in args.batches:
            seconds = median_seconds(lambda: fresh_batch(n_uav, count, generator, device), args.repeats, device)
            rows.append(
                {
                    "n_uav": n_uav,
                    "scenes": count,
                    "path": "batched",
                    "ms": 1000 * seconds,
                    "graphs_per_s": count / seconds,
                }
            )
            print(f"fresh: {count} scenes of {n_uav} UAVs in {1000 * seconds:.1f} ms = {count / seconds:,.0f} graphs/s")

    def per_scene() -> Batch:
        return Batch.from_data_list([build_graph(s, K_MAX, UAV_NEIGHBOURS) for s in generate_scenes(DIST, 16, 1024, 0)])

    seconds = median_seconds(per_scene, max(1, args.repeats // 2), torch.device("cpu"), warmup=0)
    rows.append(
        {
            "n_uav": 16,
            "scenes": 1024,
            "path": "per-scene (numpy + k-d tree + collate, CPU)",
            "ms": 1000 * seconds,
            "graphs_per_s": 1024 / seconds,
        }
    )
    print(f"per-scene path: 1024 scenes of 16 UAVs in {1000 * seconds:.0f} ms = {1024 / seconds:,.0f} graphs/s")
    return rows


def bench_step(args, device: torch.device) -> list[dict]:
    rows = []
    cfg = default_config("reinforce")
    cfg.algorithm.update(samples=8, imitation_weight=0.0)
    algorithm = Reinforce(cfg, device)
    for compiled in [False, True] if args.compile else [False]:
        for count in args.step_batches:
            model = TransformerGNN(hidden=64, heads=2, layers=2).to(device).train()
            runner = maybe_compile(model, compiled)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            generator = torch.Generator(device=device).manual_seed(0)
            resident = [fresh_batch(16, count, generator, device) for _ in range(4)]
            calls = iter(range(10**9))

            def step(batch_of: Callable[[], Batch]) -> None:
                batch = batch_of()
                batch.k = K
                loss = algorithm.training_step(runner, batch, algorithm.draws(batch, next(calls))).loss
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

            for source, batch_of in (
                ("resident", lambda: resident[next(calls) % 4]),
                ("fresh", lambda: fresh_batch(16, count, generator, device)),
            ):
                seconds = median_seconds(lambda: step(batch_of), args.repeats, device, warmup=3 if compiled else 1)
                rows.append(
                    {
                        "batch": count,
                        "data": source,
                        "compiled": compiled,
                        "ms": 1000 * seconds,
                        "graphs_per_s": count / seconds,
                    }
                )
                print(
                    f"step: batch {count}, {source}, {'compiled' if compiled else 'eager'}: "
                    f"{1000 * seconds:.1f} ms = {count / seconds:,.0f} graphs/s"
                )
    return rows


def bench_neighbours(args, device: torch.device) -> list[dict]:
    scene = generate_scenes(DIST, round(args.nodes / (1 + DIST.target_ratio)), 1, 5)[0]
    nodes = scene.n_uav + scene.n_target
    rows = []
    on_device = SceneBatch.from_scenes([scene], device)
    on_device = SceneBatch(
        on_device.uav_pos.float(),
        on_device.uav_range.float(),
        on_device.target_pos.float(),
        on_device.need,
        on_device.value.float(),
        on_device.side,
        on_device.lam,
    )
    for name, work, dev in (
        ("k-d tree (scipy, CPU)", lambda: kdtree_neighbours(scene, K_MAX, UAV_NEIGHBOURS), torch.device("cpu")),
        (f"cell grid (torch, {device.type})", lambda: grid_neighbours(on_device, K_MAX, UAV_NEIGHBOURS), device),
    ):
        seconds = median_seconds(work, args.repeats, dev, warmup=0 if nodes > 300_000 else 1)
        rows.append({"nodes": nodes, "search": name, "s": seconds})
        print(f"neighbours of {nodes:,} nodes: {name} {seconds:.2f} s")
    return rows


def plot(result: dict, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for n_uav in sorted({r["n_uav"] for r in result.get("fresh", []) if r["path"] == "batched"}):
        rows = [r for r in result["fresh"] if r["path"] == "batched" and r["n_uav"] == n_uav]
        axes[0].plot([r["scenes"] for r in rows], [r["graphs_per_s"] for r in rows], "o-", label=f"{n_uav} UAVs")
    for r in result.get("fresh", []):
        if r["path"] != "batched":
            axes[0].scatter([r["scenes"]], [r["graphs_per_s"]], marker="x", color="k", label="per-scene path")
    axes[0].set(
        xscale="log",
        yscale="log",
        xlabel="scenes per batch",
        ylabel="graphs/s",
        title=f"fresh batches: generate + build ({result['device']})",
    )
    for source, compiled in sorted({(r["data"], r["compiled"]) for r in result.get("step", [])}):
        rows = [r for r in result["step"] if r["data"] == source and r["compiled"] == compiled]
        axes[1].plot(
            [r["batch"] for r in rows],
            [r["graphs_per_s"] for r in rows],
            "o-",
            label=f"{source}, {'compiled' if compiled else 'eager'}",
        )
    axes[1].set(
        xscale="log",
        yscale="log",
        xlabel="batch size (graphs of 16 UAVs)",
        ylabel="graphs/s",
        title="REINFORCE training step, small model",
    )
    for ax in axes:
        ax.grid(alpha=0.3, which="both")
        if ax.has_data():
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sections", default="fresh,step,neighbours")
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--batches", type=int, nargs="+", default=[256, 1024, 4096, 16384])
    parser.add_argument("--step-batches", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks"))
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    sections = {"fresh": bench_fresh, "step": bench_step, "neighbours": bench_neighbours}
    unknown = set(args.sections.split(",")) - set(sections)
    if unknown:
        parser.error(f"--sections: unknown {sorted(unknown)} (choose from {', '.join(sections)})")
    result: dict = {
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"cpu, {torch.get_num_threads()} threads",
        "torch": torch.__version__,
    }
    for name in args.sections.split(","):
        result[name] = sections[name](args, device)
        print(format_table(result[name]))
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "fresh_scenes.json", result)
    plot(result, args.out / "fresh_scenes.png")
    print(f"wrote {args.out / 'fresh_scenes.json'} and {args.out / 'fresh_scenes.png'}")


if __name__ == "__main__":
    main()
