"""What the model's decision of one scene costs: aten ops and host-sync ops of the staged
decision, with its greedy decodes as the loop (the CPU's default), in all 64 fixed-shape rounds (a GPU's decision
before it read back) and in rounds read back every ``CHECK_EVERY`` (what ``decode`` runs on a GPU), and of the
forward that scores the scene, at several sizes; and the whole decision's time (``solve_with_model``: graph,
relaxation, forward, decision) beside lap's and mcf's on the same scene, the three alternated ``--repeats``
times, as ratios.

    .venv/bin/python benchmarks/bench_decision_ops.py                          # 1,024 and 4,096 UAVs, the CPU
    .venv/bin/python benchmarks/bench_decision_ops.py --sizes 1024 16384 --device cuda   # on a GPU: real waits

Each op but a view is a kernel launch on a GPU; each sync op makes the host wait for the device. The pretrained
policy scores one uniform scene (``score_scene``: graph, relaxation, forward, balancing), then
``decoders.staged_decode`` decides it the three ways; the decisions are checked equal (the rounds converged).
Milliseconds are medians of ``--repeats`` on the device given; the machine is noisy, the ratios are what count.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.inference.decoders import CHECK_EVERY, SYNC_FREE_ROUNDS, staged_decode
from uavgnn.inference.scene import score_scene, solve_with_model
from uavgnn.infrastructure.perf import OpCounter
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.reporting.tables import format_table
from uavgnn.solvers import solve


def timed(run, device: torch.device, repeats: int) -> float:
    """Median seconds of ``run()`` over ``repeats``, the device drained before each clock read."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    device = torch.device(args.device)
    model, graph, _ = load_policy("pretrained", device)
    rows = []
    for n_uav in args.sizes:
        scene = generate_scenes(SceneDistribution(), n_uav, 1, seed=61)[0]
        scores = score_scene(model, scene, graph, device)
        with OpCounter() as forward:
            score_scene(model, scene, graph, device)
        batch, keep = scores.batch, scores.keep
        uav, target = batch.cand_index[0, keep], batch.cand_index[1, keep]
        ways = {
            "loop (CPU)": (None, 0),
            f"{SYNC_FREE_ROUNDS} fixed rounds": (SYNC_FREE_ROUNDS, 0),
            f"rounds read back every {CHECK_EVERY} (GPU)": (SYNC_FREE_ROUNDS, CHECK_EVERY),
        }
        decided = {}
        for name, (rounds, check_every) in ways.items():

            def decide(rounds: int | None = rounds, check_every: int = check_every) -> torch.Tensor:
                return staged_decode(
                    scores.cand_logp,
                    scores.idle_logp,
                    uav,
                    target,
                    batch.need,
                    model.balancing,
                    rounds,
                    (batch.batch, batch.num_graphs),
                    check_every,
                )

            with OpCounter() as counted:
                decided[name] = decide()
            rows.append(
                {
                    "n_uav": n_uav,
                    "part": f"staged decision, {model.balancing.stages} stages, {name}",
                    "ops": counted.ops - counted.views,
                    "syncs": counted.syncs,
                    "ms": 1e3 * timed(decide, device, args.repeats),
                }
            )
        rows.append(
            {
                "n_uav": n_uav,
                "part": "score_scene (graph, relaxation, forward, balancing)",
                "ops": forward.ops - forward.views,
                "syncs": forward.syncs,
                "ms": 1e3 * timed(lambda: score_scene(model, scene, graph, device), device, args.repeats),
            }
        )
        whole = {
            "model decision (solve_with_model)": lambda: solve_with_model(model, scene, graph, device=device),
            "lap": lambda: solve(scene, "lap"),
            "mcf": lambda: solve(scene, "mcf"),
        }
        seconds: dict[str, list[float]] = {name: [] for name in whole}
        for _ in range(args.repeats):  # alternated: a noisy machine slows them alike
            for name, run in whole.items():
                seconds[name].append(timed(run, device, 1))
        lap_s = statistics.median(seconds["lap"])
        for name, values in seconds.items():
            rows.append(
                {
                    "n_uav": n_uav,
                    "part": name,
                    "ms": 1e3 * statistics.median(values),
                    "x_lap": statistics.median(values) / lap_s,
                }
            )
        loop, *rounds_ways = decided.values()
        same = all(torch.equal(loop, other) for other in rounds_ways)
        print(
            f"{n_uav} UAVs: the decisions are {'equal' if same else 'DIFFERENT (rounds did not converge)'}", flush=True
        )
    print(format_table(rows, ["n_uav", "part", "ops", "syncs", "ms", "x_lap"]))


if __name__ == "__main__":
    main()
