"""The greedy-decoded gap of trained assignment policies at 16, 256 and 1,024 UAVs, uniform and clustered: the
model rows of ``mode=eval``'s frontier without the other methods, for comparing checkpoints side by side.

    .venv/bin/python benchmarks/scale_gaps.py RUN/best.pt [RUN2/best.pt ...] --cache .cache/uavgnn [--rounds R]

Test sets: the fixed-seed test splits ``mode=eval`` builds (256, 32 and 8 scenes; MILP-labelled and cached in
``--cache`` if missing, proven optimal), each checkpoint with its own graph settings and ``k`` rule. ``--rounds``
overrides a refining model's refinement rounds (0: its first round alone).
"""

from __future__ import annotations

import argparse

import torch
from omegaconf import open_dict

from uavgnn.algorithms import stored_config
from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.data.splits import load_split
from uavgnn.problem.metrics import mean_metrics
from uavgnn.scoring.policy import evaluate_model

SETS = ((16, 256), (256, 32), (1024, 8))  # (UAVs, scenes): mode=eval's default scales and set sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--cache", default=".cache/uavgnn")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    for path in args.checkpoints:
        model, graph, config = load_policy(path)
        cfg = stored_config(config)
        with open_dict(cfg):
            cfg.data.update(cache_dir=args.cache, label_time_limit=60.0, fresh_sizes=[])
        gaps = []
        for positions in ("uniform", "clustered"):
            cfg.task.positions = cfg.task.name = positions
            for n_uav, scenes in SETS:
                store = load_split(cfg, "test", n_uav=n_uav, count=scenes)
                result = evaluate_model(model, store, "greedy", graph.k(n_uav), torch.device("cpu"), rounds=args.rounds)
                gaps.append(f"{positions} {n_uav}: {100 * mean_metrics(result.metrics)['optimality_gap']:.2f}%")
        print(f"{path}: " + ", ".join(gaps), flush=True)


if __name__ == "__main__":
    main()
