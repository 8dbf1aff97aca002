"""MASAC, COMA and MAPPO runs side by side: the numbers of each run's own test table, and per algorithm the
interquartile mean over its runs (and tasks) with its 95% stratified-bootstrap interval, as the MARL community
reports them (rliable's method; ``--json`` writes the runs in marl-eval's format).

    .venv/bin/python benchmarks/compare_marl.py multirun/<sweep>                      # a sweep's runs
    .venv/bin/python benchmarks/compare_marl.py runs/masac_s{0,1,2} runs/coma_s{0,1,2} --json marl_eval.json
    .venv/bin/python benchmarks/compare_marl.py runs/*/best.pt --markdown              # a checkpoint: its run

This is ``mode=compare``'s MARL section (``uavgnn.reporting.marl_table``), one path: it replays nothing, so every
figure is the one the run's test phase measured (its best policy, greedy, on ``env.val_episodes`` fixed test
episodes of the horizon it was trained for, ``uavgnn.evaluation.episodes.TEST_SEED``), with that task's scripted
planner, nearest targets and random actions on the same episodes; ``of_planner`` is the share of the planner's
return there, the score to compare across tasks.

Replaying on other episodes is another experiment, asked for by name and labelled as such:

    .venv/bin/python benchmarks/compare_marl.py RUN ... --horizon 14 --episodes 256   # every checkpoint, same scenes
    .venv/bin/python benchmarks/compare_marl.py multirun/mappo-swarm --n-uav 64      # graph actors, zero-shot

Every checkpoint then plays its greedy policy in the action mode it was trained in on the same test scenes and
horizon (unset: the first run's own), each mode's rows followed by that mode's references; runs of one algorithm
and config but different seeds are summarised as mean +- std at the end. Its numbers equal the runs' own tables
only at their own horizon and episode count (replayed at another horizon or on other episodes, a run reads
otherwise than in its own table).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

import torch

from uavgnn.algorithms.compared import environment_policy_runs, metrics_of
from uavgnn.algorithms.env_policy import compare_checkpoints
from uavgnn.infrastructure.console import count
from uavgnn.infrastructure.errors import CheckpointError
from uavgnn.infrastructure.storage import write_json
from uavgnn.reporting import marl_table
from uavgnn.reporting.comparison import render_marl
from uavgnn.reporting.run_metrics import differing_keys
from uavgnn.reporting.tables import format_table, markdown_table
from uavgnn.runs.record import find_runs, load_run


def seed_summary(rows: list[dict]) -> list[dict]:
    """Mean +- std over the seeds of each (algorithm, action mode), for rows labelled "<alg> seed <s> (...)"."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        match = re.match(r"(\w+) seed \d+ ", row["method"])
        if match:
            groups.setdefault((match.group(1), row["actions"]), []).append(row)
    return [
        {
            "method": f"{alg} ({count(len(group), 'seed')})",
            "actions": mode,
            **{
                key: f"{statistics.mean(r[key] for r in group):.4f} +- "
                f"{statistics.stdev(r[key] for r in group) if len(group) > 1 else 0.0:.4f}"
                for key in ("return", "completion_rate", "collisions", "of_planner")
            },
        }
        for (alg, mode), group in groups.items()
    ]


def run_directories(paths: list[str]) -> list[Path]:
    """Run directories from the arguments: a run, a sweep (its runs) or a checkpoint (its run)."""
    return find_runs([Path(p).parent if p.endswith(".pt") else Path(p) for p in paths])


def own_tables(paths: list[str]) -> tuple[str, list[dict], list[dict], dict]:
    """The runs' own test tables and the IQM per algorithm (``mode=compare``'s MARL section): its text, the
    tables' rows, the IQM rows and the runs in marl-eval's format."""
    runs = [load_run(d) for d in run_directories(paths)]
    marl = environment_policy_runs(runs)
    if not marl:
        raise CheckpointError(f"no finished environment-policy run among {', '.join(paths)}")
    keys = differing_keys(marl)
    text, summary, data = render_marl(marl, keys, metrics_of(marl))
    return text, marl_table.test_tables(marl, marl_table.algorithm_labels(marl, keys)), summary, data


def replayed(args: argparse.Namespace) -> list[dict]:
    """Every checkpoint replayed on the same episodes (``--horizon``, ``--episodes``, ``--n-uav``)."""
    runs = [load_run(d) for d in run_directories(args.paths)]
    first = runs[0].config
    horizon = args.horizon or int(first.get("env.horizon", 25))
    episodes = args.episodes or int(first.get("env.val_episodes", 256))
    checkpoints = [str(r.directory / "best.pt") for r in runs]
    print(f"replayed: {count(episodes, 'episode')} of {horizon} steps - not the runs' own test tables")
    return compare_checkpoints(checkpoints, episodes, horizon, torch.device("cpu"), n_uav=args.n_uav)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", help="run directories, sweeps, or best.pt files (their runs)")
    parser.add_argument("--json", type=Path, help="write the runs in marl-eval's raw-data format here")
    parser.add_argument("--horizon", type=int, help="replay: steps per episode for every policy")
    parser.add_argument("--episodes", type=int, help="replay: test episodes (the same scenes for all)")
    parser.add_argument("--n-uav", type=int, default=None, help="replay: UAVs per episode (graph actors)")
    parser.add_argument("--markdown", action="store_true", help="also print the tables as markdown")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    try:
        if args.horizon or args.episodes or args.n_uav:
            rows = replayed(args)
            tables = [rows, seed_summary(rows)]
            print("\n\n".join(format_table(t) for t in tables if t))
        else:
            text, rows, summary, data = own_tables(args.paths)
            tables = [rows, summary]
            print(text)
            if args.json:
                write_json(args.json, data)
    except (CheckpointError, FileNotFoundError) as error:  # a missing, foreign or mismatched run: one line
        parser.error(str(error))
    if args.markdown:
        for table in tables:
            if table:
                print("\n" + markdown_table(list(table[0]), [list(row.values()) for row in table]))


if __name__ == "__main__":
    main(sys.argv[1:])
