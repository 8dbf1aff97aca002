"""How close ``mode=eval``'s up-front duration estimate comes to the time it then takes (within 1.5x), for an
assignment policy with a cold cache (every test set labelled) and then warm (every set cached), and for an
environment policy (no cache: ``--states once``).

    .venv/bin/python benchmarks/bench_eval_estimate.py                 # the README example, ckpt=pretrained
    .venv/bin/python benchmarks/bench_eval_estimate.py --repeats 3 --out outputs/benchmarks/eval_estimate.json
    .venv/bin/python benchmarks/bench_eval_estimate.py --states once -- mode=eval ckpt=<marl run>/best.pt \
        "eval.scales=[64,256]"

Each repeat runs the ``mode=eval`` command for real (``run.py``, a fresh cache directory of its own) once per
state and reads its report's (``transfer.json``, or ``eval.json`` for an environment policy) ``estimated_s`` and
``took_s`` (the scoring, probe excluded); the wall time of the whole command is reported beside them. Prints
medians over the repeats and the worst ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_EXAMPLE = ["mode=eval", "ckpt=pretrained", "eval.scales=[16,64,256]", "eval.milp_time_limit=30"]


def one_eval(cache: Path, run_dir: Path, overrides: list[str]) -> dict[str, float]:
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "run.py"),
            *overrides,
            "logger=jsonl",
            f"data.cache_dir={cache}",
            f"hydra.run.dir={run_dir}",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    report = json.loads(
        (run_dir / ("transfer.json" if (run_dir / "transfer.json").exists() else "eval.json")).read_text()
    )
    return {
        "estimated_s": report["estimated_s"],
        "took_s": report["took_s"],
        "wall_s": wall,
        "ratio": report["took_s"] / report["estimated_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument("--states", nargs="+", default=["cold", "warm"], help="runs a repeat (once: no cache)")
    parser.add_argument("overrides", nargs="*", help="run.py overrides instead of the README example's")
    args = parser.parse_args()
    overrides = args.overrides or README_EXAMPLE
    runs: dict[str, list[dict[str, float]]] = {state: [] for state in args.states}
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        for repeat in range(args.repeats):
            cache = Path(tmp) / f"cache{repeat}"
            for state in args.states:
                runs[state].append(one_eval(cache, Path(tmp) / f"run{repeat}-{state}", overrides))
                print(f"repeat {repeat} {state}: {json.dumps({k: round(v, 2) for k, v in runs[state][-1].items()})}")
    summary = {
        state: {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        | {"worst_ratio": max((r["ratio"] for r in rows), key=lambda x: max(x, 1 / x))}
        for state, rows in runs.items()
    }
    print(f"run.py {' '.join(overrides)}")
    for state, row in summary.items():
        print(
            f"{state}: estimated {row['estimated_s']:.0f} s, took {row['took_s']:.0f} s (command "
            f"{row['wall_s']:.0f} s wall): measured / estimated {row['ratio']:.2f} (worst {row['worst_ratio']:.2f} "
            f"of {args.repeats})"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"overrides": overrides, "runs": runs, "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
