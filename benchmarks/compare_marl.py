"""MASAC, COMA and MAPPO checkpoints against the scripted planner, nearest targets and random actions, on the
same scenes and horizon, whatever each checkpoint's action mode (issue 18's one table); graph actors also on
swarms of another size (``--n-uav``, zero-shot).

    .venv/bin/python benchmarks/compare_marl.py outputs/<masac run>/best.pt outputs/<coma run>/best.pt ...
    .venv/bin/python benchmarks/compare_marl.py RUN/best.pt ... --horizon 14 --episodes 256 --markdown
    .venv/bin/python benchmarks/compare_marl.py multirun/mappo-swarm/*/best.pt --horizon 40 --n-uav 64

Every checkpoint plays its greedy policy in the action mode it was trained in, on the test episodes
(``uavgnn.envs.evaluation.TEST_SEED``, none of them seen in training or validation); each mode's rows are
followed by that mode's references and ``of_planner`` is the share of that mode's scripted planner.
Checkpoints of the same algorithm and config but different seeds are summarised as mean +- std at the end.
"""

from __future__ import annotations

import argparse
import re
import statistics

import torch

from uavgnn.algorithms.env_policy import compare_checkpoints
from uavgnn.errors import CheckpointError
from uavgnn.report import count, format_table, markdown_table


def seed_summary(rows: list[dict]) -> list[dict]:
    """Mean +- std over the seeds of each (algorithm, action mode), for rows labelled "<alg> seed <s> (...)"."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        match = re.match(r"(\w+) seed \d+ ", row["method"])
        if match:
            groups.setdefault((match.group(1), row["actions"]), []).append(row)
    return [{"method": f"{alg} ({count(len(group), 'seed')})", "actions": mode,
             **{key: f"{statistics.mean(r[key] for r in group):.4f} +- "
                     f"{statistics.stdev(r[key] for r in group) if len(group) > 1 else 0.0:.4f}"
                for key in ("return", "completion_rate", "collisions", "of_planner")}}
            for (alg, mode), group in groups.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="+", help="best.pt files of MASAC, COMA and MAPPO runs")
    parser.add_argument("--horizon", type=int, default=14, help="steps per episode for every policy")
    parser.add_argument("--episodes", type=int, default=256, help="test episodes (the same scenes for all)")
    parser.add_argument("--n-uav", type=int, default=None, help="UAVs per episode (default: the trained size)")
    parser.add_argument("--markdown", action="store_true", help="also print the tables as markdown")
    args = parser.parse_args()
    torch.set_num_threads(1)
    try:
        rows = compare_checkpoints(args.checkpoints, args.episodes, args.horizon, torch.device("cpu"),
                                   n_uav=args.n_uav)
    except CheckpointError as error:  # a missing, foreign or mismatched checkpoint: one line, no traceback
        parser.error(str(error))
    summary = seed_summary(rows)
    print(format_table(rows))
    if summary:
        print("\n" + format_table(summary))
    if args.markdown:
        for table in (rows, summary):
            if table:
                print("\n" + markdown_table(list(table[0]), [list(row.values()) for row in table]))


if __name__ == "__main__":
    main()
