"""One MARL table over seeds: the ``eval.json`` of ``mode=eval`` on each seed's checkpoint (the same test episodes
for every seed), per swarm size, test set (nominal and disrupted) and method, the mean +- std of ``of_planner``
(the share of the central planner's return on that set) with its 95% interval (``uavgnn.reporting.intervals``), and
the policy over the decentralised planner and over CBBA, each method's collisions per UAV in an episode (steps a
UAV spent closer than the collision radius to another: the penalty that grows with the swarm), and what a decision
costs: milliseconds a step of all the set's episodes at once, rounds of messages and messages per UAV.

    for s in 0 1 2; do
      .venv/bin/python run.py experiment=swarm seed=$s hydra.run.dir=outputs/swarm_s$s
      .venv/bin/python run.py mode=eval ckpt=outputs/swarm_s$s/best.pt "eval.scales=[64,256]" eval.episodes=32 \\
          hydra.run.dir=outputs/swarm_s$s/eval
    done
    .venv/bin/python benchmarks/swarm_seeds.py outputs/swarm_s{0,1,2}/eval --markdown
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from uavgnn.evaluation.episodes import CBBA, IDLE_HOME, LOCAL_TOLD_MOTION, TOLD_MOTION
from uavgnn.reporting.intervals import mean_interval
from uavgnn.reporting.tables import format_table

REFERENCES = (
    "scripted planner",
    "decentralised planner",
    CBBA,
    IDLE_HOME,
    TOLD_MOTION,
    LOCAL_TOLD_MOTION,
    "nearest target",
)
COSTS = ("step_ms", "rounds", "messages_per_uav")


def seed_rows(reports: list[dict]) -> list[dict]:
    """Per (size, test set, method): the seeds' mean and std of ``of_planner`` and its interval, in percent, and the
    mean costs; the policy's rows add its mean return over the decentralised planner's and over CBBA's (none where
    that is not positive)."""
    policy = reports[0]["algorithm"]
    scores: dict[tuple[int, str, str], list[float]] = {}
    returns: dict[tuple[int, str, str], list[float]] = {}
    collisions: dict[tuple[int, str, str], list[float]] = {}
    costs: dict[tuple[int, str, str, str], list[float]] = {}
    for report in reports:
        for row in report["rows"]:
            key = (row["n_uav"], row.get("test_set", "nominal"), row["method"])
            scores.setdefault(key, []).append(100 * row["of_planner"])
            returns.setdefault(key, []).append(row["return"])
            collisions.setdefault(key, []).append(row["collisions"] / row["n_uav"])
            step = {"step_ms": 1000 * row["time_s"] / report["horizon"], **row}
            for cost in COSTS:
                if cost in step:
                    costs.setdefault((*key, cost), []).append(step[cost])
    rows = []
    for (n_uav, test_set, method), values in scores.items():
        if method not in (policy, *REFERENCES):
            continue
        interval = mean_interval(values)
        row = {
            "n_uav": n_uav,
            "test_set": test_set,
            "method": method,
            "seeds": len(values),
            "of_planner_pct": round(statistics.mean(values), 1),
            "std": round(statistics.stdev(values), 1) if len(values) > 1 else float("nan"),
            "ci95": "n/a" if interval is None else f"[{interval.low:.1f}, {interval.high:.1f}]",
            "collisions_per_uav": round(statistics.mean(collisions[(n_uav, test_set, method)]), 2),
            **{
                cost: round(statistics.median(costs[(n_uav, test_set, method, cost)]), 1)
                for cost in COSTS
                if (n_uav, test_set, method, cost) in costs
            },
        }
        if method == policy:
            mine = statistics.mean(returns[(n_uav, test_set, method)])
            for other, column in (("decentralised planner", "of_decentralised_pct"), (CBBA, "of_cbba_pct")):
                theirs = returns.get((n_uav, test_set, other))  # the same every seed
                if theirs:
                    ratio = mine / statistics.mean(theirs)
                    row[column] = round(100 * ratio, 1) if statistics.mean(theirs) > 0 else float("nan")
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("evals", nargs="+", type=Path, help="mode=eval output directories (each with eval.json)")
    parser.add_argument("--markdown", action="store_true", help="a markdown table instead of the console's")
    args = parser.parse_args(argv)
    missing = [str(d) for d in args.evals if not (d / "eval.json").is_file()]
    if missing:
        print(f"no eval.json in {', '.join(missing)}: run mode=eval ckpt=<run>/best.pt there first", file=sys.stderr)
        return 2
    rows = seed_rows([json.loads((d / "eval.json").read_text()) for d in args.evals])
    columns = [
        "n_uav",
        "test_set",
        "method",
        "seeds",
        "of_planner_pct",
        "std",
        "ci95",
        "of_decentralised_pct",
        "of_cbba_pct",
        "collisions_per_uav",
        *COSTS,
    ]
    if args.markdown:
        print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
        for row in rows:
            print("| " + " | ".join(str(row.get(c, "")) for c in columns) + " |")
    else:
        print(format_table(rows, columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
