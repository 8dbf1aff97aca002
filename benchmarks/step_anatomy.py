"""Step anatomy of every algorithm: aten ops and host-sync ops per training step between two log points.

    .venv/bin/python benchmarks/step_anatomy.py                       # every configuration, a table
    .venv/bin/python benchmarks/step_anatomy.py --only masac --trace  # where each sync op comes from
    .venv/bin/python benchmarks/step_anatomy.py --only coma --by-function  # the ops each function asks for
    .venv/bin/python benchmarks/step_anatomy.py hardware.device=cuda  # extra overrides for every run
    .venv/bin/python benchmarks/step_anatomy.py optim.compile=true    # the compiled step: compiles, graph breaks

Each algorithm trains for real (its ``experiment=debug`` configuration, as BENCHMARKS.md's table counts it) under
``uavgnn.training.anatomy.step_anatomy``: ``--warmup`` steps, then ``--steps`` counted ones. On a GPU each
aten op but a view (``views/step``: ``view``, ``t``, ``detach``, slices... alias a tensor, launch nothing) is at
least one kernel launch; each sync op makes the host wait for the device. With
``optim.compile=true``, ``compiles`` and ``graph breaks`` (over the whole run) say whether the compiled step stays
one graph compiled once; ops and syncs stay the eager step's (under a counting dispatch mode TorchDynamo runs the
step's ops one by one).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from uavgnn.program.from_python import compose_config
from uavgnn.reporting.tables import format_table
from uavgnn.training.anatomy import step_anatomy

ALGORITHMS = {  # the configurations BENCHMARKS.md counts
    "imitation": ["experiment=debug"],
    "reinforce": ["experiment=debug", "algorithm=reinforce", "data.source=generated"],
    "masac": ["experiment=debug", "algorithm=masac"],
    "coma": ["experiment=coma"],
    "mappo": ["experiment=debug", "algorithm=mappo"],
    "swarm": ["experiment=swarm"],  # MAPPO's graph actor, the planner teaching
    "dynamics": ["experiment=debug", "algorithm=dynamics"],
    # the two EKFs inside its step (its filter's tuning, before the loop, cut short: not counted)
    "learned_filter": [
        "experiment=debug",
        "algorithm=dynamics",
        "model=learned_filter",
        "algorithm.filter_tuning_steps=10",
    ],
}
BEFORE_SYNC_FREE = {
    "imitation": (1312, 16),
    "reinforce": (2229, 25),
    "masac": (1055, 7),
    "coma": (477, 12),
    "dynamics": (368, 4),
}  # counted on the code before the steps stopped waiting on the host (ops, syncs per step); mappo came after


def algorithms(names: str) -> list[str]:
    """``--only``'s value: comma-separated, so that Hydra overrides may follow it."""
    chosen = names.split(",")
    unknown = [name for name in chosen if name not in ALGORITHMS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)} (choose from {', '.join(ALGORITHMS)})")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    parser.add_argument(
        "--only",
        type=algorithms,
        default=list(ALGORITHMS),
        help="comma-separated algorithms, e.g. reinforce,imitation (default: all)",
    )
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--trace", action="store_true", help="print the line that asked for each sync op")
    parser.add_argument(
        "--by-function",
        action="store_true",
        help="print the ops per step each uavgnn function asked for (its callees' apart; the "
        "backward's are the function that called it)",
    )
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only:
            cfg = compose_config([*ALGORITHMS[name], f"data.cache_dir={tmp}/cache", *args.overrides])
            anatomy = step_anatomy(cfg, Path(tmp) / name, args.warmup, args.steps, args.trace, args.by_function)
            before_ops, before_syncs = BEFORE_SYNC_FREE.get(name, ("", ""))
            rows.append(
                {
                    "algorithm": name,
                    "ops/step": round(anatomy.ops_per_step),
                    "before": before_ops,
                    "views/step": round(anatomy.views_per_step),
                    "syncs/step": round(anatomy.syncs_per_step, 1),
                    "syncs before": before_syncs,
                    "compiles": anatomy.compiles,
                    "graph breaks": anatomy.graph_breaks,
                }
            )
            for site, count in sorted(anatomy.sync_sites.items(), key=lambda kv: -kv[1]):
                print(f"  {name}: {count / args.steps:.1f}/step {site}")
            for function, count in sorted(anatomy.functions.items(), key=lambda kv: -kv[1]):
                print(f"  {name}: {count / args.steps:6.1f} ops/step in {function}")
    print(format_table(rows))


if __name__ == "__main__":
    main()
