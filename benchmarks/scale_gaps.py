"""The greedy-decoded gap of trained assignment policies at 16, 256 and 1,024 UAVs, uniform and clustered: the
model rows of ``mode=eval``'s frontier without the other methods, for comparing checkpoints side by side.

    .venv/bin/python benchmarks/scale_gaps.py RUN/best.pt [RUN2/best.pt ...] --cache .cache/uavgnn [--rounds R] \
        [--capacity-iters I] [--capacity-fill F] [--commit-stages S] [--k-max K] [--uav-neighbours U]

Test sets: the fixed-seed test splits ``mode=eval`` builds (256, 32 and 8 scenes; MILP-labelled and cached in
``--cache`` if missing, proven optimal), each checkpoint with its own graph settings and ``k`` rule. ``--rounds``
overrides a refining model's refinement rounds (0: its first round alone), ``--capacity-iters`` the balancing of
the deciding policy against the targets' needs (0: the plain policy; ``model.capacity_iters``), ``--capacity-fill``
the share of its need from which a target is filled up to it (1: never; ``model.capacity_fill``), ``--commit-stages``
the stages of its decision, the surest targets first (0: one greedy decode; ``model.commit_stages``), ``--k-max`` the
candidates per UAV the graphs keep (the k rule's cap: more candidates than the model was trained with),
``--uav-neighbours`` the UAV neighbours each UAV's graph links.
``--split val`` scores validation scenes of the training task instead (where settings such as ``--capacity-fill``
are chosen): the training size's validation split, and validation scenes at 256 and 1,024 UAVs (32 and 8, seeded
by the validation split's rule: never the test scenes).

``--bound-sizes 4096`` adds sizes where no optimum is proven in reasonable time (``--bound-scenes`` uniform scenes
each, seeded by the test split's rule): the model's greedy decode against the best bounds known, the guided MILP's
incumbent (``solve.guided_keep=2``, within 0.15% of the optimum at 4,096 UAVs: a lower bound of the true gap) and
the linear relaxation's optimum (every feasible pair: an upper bound of the true gap).
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import torch
from bench_scale_solvers import relaxation_bound
from omegaconf import open_dict

from uavgnn.algorithms.checkpoint_config import stored_config
from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.config.settings import scene_distribution, split_settings
from uavgnn.data.splits import load_split, split_spec
from uavgnn.evaluation.assignments import evaluate_model
from uavgnn.inference.guided import solve_guided
from uavgnn.inference.scene import solve_with_model
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.metrics import mean_metrics

SETS = ((16, 256), (256, 32), (1024, 8))  # (UAVs, scenes): mode=eval's default scales and set sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--cache", default=".cache/uavgnn")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--capacity-iters", type=int, default=None, help="default: the checkpoint's own")
    parser.add_argument("--capacity-fill", type=float, default=None, help="default: the checkpoint's own")
    parser.add_argument("--commit-stages", type=int, default=None, help="default: the checkpoint's own")
    parser.add_argument("--k-max", type=int, default=None, help="default: the checkpoint's own")
    parser.add_argument("--uav-neighbours", type=int, default=None, help="default: the checkpoint's own")
    parser.add_argument("--bound-sizes", type=int, nargs="*", default=[], help="e.g. 4096")
    parser.add_argument("--bound-scenes", type=int, default=2)
    parser.add_argument(
        "--split",
        choices=["test", "val"],
        default="test",
        help="val: validation scenes of the training task (its size, 256, 1,024): where to choose",
    )
    args = parser.parse_args()
    for path in args.checkpoints:
        model, graph, config = load_policy(path)
        for value, field in (
            (args.capacity_iters, "iters"),
            (args.capacity_fill, "fill"),
            (args.commit_stages, "stages"),
        ):
            if value is not None:
                model.balancing = replace(model.balancing, **{field: value})
        if args.k_max is not None:
            graph = replace(graph, k_max=args.k_max)
        if args.uav_neighbours is not None:
            graph = replace(graph, uav_neighbours=args.uav_neighbours)
        cfg = stored_config(config)
        with open_dict(cfg):
            cfg.data.update(
                cache_dir=args.cache,
                label_time_limit=60.0,
                fresh_sizes=[],
                k_max=graph.k_max,
                uav_neighbours=graph.uav_neighbours,
            )
        if args.split == "val":
            sets = ((cfg.data.n_uav, None),) + SETS[1:]  # the training size's own validation split, then the scales
            gaps = [
                f"{n_uav}: {gap(model, load_split(split_settings(cfg), 'val', n_uav, scenes), graph, args.rounds)}"
                for n_uav, scenes in sets
            ]
            print(f"{path}: validation ({cfg.task.name}) " + ", ".join(gaps), flush=True)
            continue
        gaps = []
        for positions in ("uniform", "clustered"):
            cfg.task.positions = cfg.task.name = positions
            for n_uav, scenes in SETS:
                store = load_split(split_settings(cfg), "test", n_uav, scenes)
                gaps.append(f"{positions} {n_uav}: {gap(model, store, graph, args.rounds)}")
        cfg.task.positions = cfg.task.name = "uniform"
        for n_uav in args.bound_sizes:
            gaps.append(f"uniform {n_uav}: {bound_gaps(model, graph, cfg, n_uav, args.bound_scenes)}")
        print(f"{path}: " + ", ".join(gaps), flush=True)


def gap(model: torch.nn.Module, store, graph, rounds: int | None) -> str:
    """The mean gap of the model's greedy decode on ``store`` against its proven optima."""
    n_uav = int(store.tensors["n_uav"][0])
    result = evaluate_model(model, store, "greedy", graph.k(n_uav), torch.device("cpu"), rounds=rounds)
    return f"{100 * mean_metrics(result.metrics)['optimality_gap']:.2f}%"


def bound_gaps(model: torch.nn.Module, graph, cfg, n_uav: int, count: int) -> str:
    """The model's greedy gap (%) against the guided MILP's incumbent and the relaxation bound, means over scenes."""
    scenes = generate_scenes(
        scene_distribution(cfg), n_uav, count, seed=split_spec(split_settings(cfg), "test", n_uav, count).seed
    )
    to_guided, to_bound = [], []
    for scene in scenes:
        found = solve_with_model(model, scene, graph)[0].objective
        best = max(solve_guided(model, scene, graph, keep=2)[0].objective, found)
        bound = relaxation_bound(scene)[0]
        to_guided.append(100 * (best - found) / best)
        to_bound.append(100 * (bound - found) / bound)
    return f"{sum(to_guided) / count:.2f}% (guided) .. {sum(to_bound) / count:.2f}% (bound)"


if __name__ == "__main__":
    main()
