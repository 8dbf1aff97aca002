"""Where a trained assignment policy loses against the MILP on a test set: per scene, the targets each completes,
its busy and idle UAVs and their travel, the targets completed by one and not the other, and how many of the
targets the model leaves incomplete its idle UAVs could complete alone (each has at least ``need`` idle UAVs
that list it among their ``k`` candidates; sharing ignored, so an upper bound).

    .venv/bin/python benchmarks/scale_losses.py RUN/best.pt --uavs 256 --scenes 32 --cache .cache/uavgnn

The test split is the one ``mode=eval`` and ``benchmarks/scale_gaps.py`` use (MILP-labelled, cached in ``--cache``
if missing); the model decodes greedily, with its own graph settings, refinement rounds and balancing.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from omegaconf import open_dict

from uavgnn.algorithms.checkpoint_config import stored_config
from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.config.settings import split_settings
from uavgnn.data.splits import load_split
from uavgnn.evaluation.assignments import evaluate_model
from uavgnn.problem.metrics import mean_metrics
from uavgnn.problem.scenes import Scene


def assignment_counts(scene: Scene, assignment: np.ndarray) -> tuple[dict[str, float], np.ndarray]:
    """(what an assignment does with the scene, which targets it completes)."""
    busy = assignment >= 0
    count = np.bincount(assignment[busy], minlength=scene.n_target)
    completed = count >= scene.need
    travel = np.linalg.norm(scene.uav_pos[busy] - scene.target_pos[assignment[busy]], axis=1).sum()
    return {
        "completed": completed.sum(),
        "value": (scene.value * completed).sum(),
        "busy": busy.sum(),
        "idle": (~busy).sum(),
        "partial": ((count > 0) & ~completed).sum(),
        "travel": travel,
    }, completed


def completable_by_idle(scene: Scene, assignment: np.ndarray, cand_index: np.ndarray, completed: np.ndarray) -> int:
    """Targets left incomplete that at least ``need`` idle UAVs list among their candidates (sharing ignored)."""
    uav, target = cand_index[0], cand_index[1] - scene.n_uav
    listed = (assignment[uav] < 0) & ~completed[target]
    idle_listing = np.bincount(target[listed], minlength=scene.n_target)
    return int((~completed & (idle_listing >= scene.need)).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--uavs", type=int, default=256)
    parser.add_argument("--scenes", type=int, default=32)
    parser.add_argument("--cache", default=".cache/uavgnn")
    args = parser.parse_args()
    model, graph, config = load_policy(args.checkpoint)
    cfg = stored_config(config)
    with open_dict(cfg):
        cfg.data.update(cache_dir=args.cache, label_time_limit=60.0, fresh_sizes=[])
    store = load_split(split_settings(cfg), "test", n_uav=args.uavs, count=args.scenes)
    k = graph.k(args.uavs)
    result = evaluate_model(model, store, "greedy", k, torch.device("cpu"))
    totals: dict[str, dict[str, float]] = {"model": {}, "milp": {}, "targets": {}}
    for i, (scene, found, label) in enumerate(zip(store.scenes(), result.assignments, store.label_assignments())):
        (model_counts, by_model), (milp_counts, by_milp) = (assignment_counts(scene, a) for a in (found, label))
        graph_i = store.get(i)
        cand_index = graph_i.cand_index[:, graph_i.cand_rank < k].numpy()
        rows = {
            "model": model_counts,
            "milp": milp_counts,
            "targets": {
                "in scene": scene.n_target,
                "completed by both": (by_model & by_milp).sum(),
                "by the model only": (by_model & ~by_milp).sum(),
                "by the MILP only": (~by_model & by_milp).sum(),
                "left incomplete by the model": (~by_model).sum(),
                "of those, completable by its idle UAVs": completable_by_idle(scene, found, cand_index, by_model),
            },
        }
        for name, counts in rows.items():
            for key, value in counts.items():
                totals[name][key] = totals[name].get(key, 0.0) + float(value)
    gap = 100 * mean_metrics(result.metrics)["optimality_gap"]
    print(f"{args.checkpoint}: {args.uavs} UAVs, {args.scenes} scenes, k {k}, gap {gap:.2f}%; means per scene:")
    for name, counts in totals.items():
        print(f"  {name}: " + ", ".join(f"{key} {value / args.scenes:.2f}" for key, value in counts.items()))


if __name__ == "__main__":
    main()
