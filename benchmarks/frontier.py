"""The quality-time frontier of a checkpoint against the controls, over several seeds of test scenes.

    .venv/bin/python benchmarks/frontier.py --ckpt pretrained --out outputs/frontier            # 16 .. 16,384 UAVs
    .venv/bin/python benchmarks/frontier.py --ckpt RUN/best.pt --scales 16 256 1024 --seeds 0 1 2 --out DIR

Every set is what ``mode=eval`` scores (``SetScorer``: the fixed-seed test split at that size, labelled by the MILP
with ``eval.milp_time_limit``, every method and control of ``eval.*`` on it, timed the same way, scene by scene),
for each test distribution, scale and seed (seed s moves ``data.test_seed`` by s x 100,000: seed 0 is
``mode=eval``'s own set). Without ``mode=eval``'s duration probe, so each set is scored once. Each set's rows are
written to ``DIR/sets/`` when it is done and a set found there is not scored again: an interrupted benchmark goes
on where it stopped. At the end, per distribution, scale and method: the mean gap over the seeds with the
half-width of its 95% interval (Student's t over the seeds' means), the mean time per scene; whether each
method built on the model is on the frontier (no control - a method without the model - is as fast and as good:
time and gap both at most its own); and whether the model's own decision is at most lap's gap.
Writes ``DIR/frontier.json``, ``DIR/frontier.md`` and ``DIR/frontier.png``. Extra ``key=value`` arguments are
Hydra overrides of the evaluation (e.g. ``eval.milp_budgets=[1.0]``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf, open_dict

from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.config.settings import test_set_settings
from uavgnn.evaluation.test_sets import SetScorer
from uavgnn.infrastructure.device import amp_dtype
from uavgnn.infrastructure.storage import write_json
from uavgnn.infrastructure.threads import apply_threads
from uavgnn.program.from_python import compose_config
from uavgnn.reporting.evaluation_pictures import plot_frontier
from uavgnn.reporting.intervals import ci95

SEED_STRIDE = 100_000  # data.test_seed per seed of scenes (under the probe seeds of 4,000,000)
MODEL_BASED = ("model (", "single-stage (", "unbalanced (", "sampled (", "unrefined (", "model-pruned milp")


def score_sets(args: argparse.Namespace) -> list[dict]:
    """Every (seed, distribution, scale) set's rows, scored now or read back from ``DIR/sets``."""
    cfg = compose_config(
        ["mode=eval", f"ckpt={args.ckpt}", "eval.shift_sets=[]", "eval.best_of=0", "logger=none", *args.overrides]
    )
    apply_threads(cfg.hardware.threads)
    cpu = torch.device("cpu")
    model, graph, trained = load_policy(cfg.ckpt, cpu, "benchmarks/frontier.py --ckpt")
    rows, done = [], args.out / "sets"
    done.mkdir(parents=True, exist_ok=True)
    base_seed = cfg.data.test_seed
    for seed in args.seeds:
        for positions in args.positions:
            for n_uav in args.scales:
                path = done / f"seed{seed}-{positions}-{n_uav}.json"
                if not path.exists():
                    start = time.perf_counter()
                    with open_dict(cfg):
                        cfg.data.test_seed = base_seed + seed * SEED_STRIDE
                    task = {**OmegaConf.to_container(cfg.task), "positions": positions, "name": positions}
                    settings = test_set_settings(cfg, amp_dtype(cfg, cpu))  # this seed's test split
                    scored, _ = SetScorer(settings, model, graph, cpu).score(task, n_uav)
                    write_json(path, [{"seed": seed, "positions": positions, **row} for row in scored])
                    print(f"seed {seed}, {positions}, {n_uav} UAVs: {time.perf_counter() - start:.0f} s", flush=True)
                rows += json.loads(path.read_text())
    print(f"checkpoint {args.ckpt} (trained at {trained['data']['n_uav']} UAVs)")
    return rows


def aggregate(rows: list[dict]) -> list[dict]:
    """Per (distribution, scale, method): mean gap and time over the seeds, the gap's 95% half-width."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        if "optimality_gap" in row:
            groups.setdefault((row["positions"], row["n_uav"], row["method"]), []).append(row)
    out = []
    for (positions, n_uav, method), group in groups.items():
        gaps = [r["optimality_gap"] for r in group]
        out.append(
            {
                "positions": positions,
                "n_uav": n_uav,
                "method": method,
                "seeds": len(group),
                "scenes": sum(r["scenes"] for r in group),
                "optimality_gap": statistics.fmean(gaps),
                "gap_ci95": ci95(statistics.stdev(gaps), len(gaps)) if len(gaps) > 1 else float("nan"),
                "time_s": statistics.fmean(r["time_s"] for r in group),
                **{
                    key: statistics.fmean(r[key] for r in group)
                    for key in ("score_s", "milp_s")
                    if all(key in r for r in group)
                },  # a pruned MILP's: its pruner's time, HiGHS's
                "reference_optimal": ", ".join(r["reference_optimal"] for r in group),
            }
        )
    return out


def verdicts(means: list[dict]) -> list[dict]:
    """Per distribution and scale: each model-based method's nearest control in the way (as fast and as good),
    or none (it is on the frontier); and the model's own decision against lap."""
    lines = []
    for key in dict.fromkeys((r["positions"], r["n_uav"]) for r in means):
        here = [r for r in means if (r["positions"], r["n_uav"]) == key]
        controls = [r for r in here if not r["method"].startswith(MODEL_BASED)]
        lap = next((r for r in here if r["method"] == "lap"), None)
        for row in (r for r in here if r["method"].startswith(MODEL_BASED)):
            beaten = [
                c for c in controls if c["time_s"] <= row["time_s"] and c["optimality_gap"] <= row["optimality_gap"]
            ]
            lines.append(
                {
                    "positions": key[0],
                    "n_uav": key[1],
                    "method": row["method"],
                    "gap_pct": 100 * row["optimality_gap"],
                    "time_s": row["time_s"],
                    "on_frontier": not beaten,
                    "dominated_by": ", ".join(c["method"] for c in beaten),
                    "at_most_lap": None if lap is None else row["optimality_gap"] <= lap["optimality_gap"],
                }
            )
    return lines


def markdown(means: list[dict], lines: list[dict]) -> str:
    """The tables of ``frontier.md``: every method's mean gap and time; the verdicts."""
    out = [
        "| distribution | UAVs | method | gap % (95% CI over seeds) | s / scene | of it HiGHS | seeds, scenes | "
        "MILP proven |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in means:
        out.append(
            f"| {r['positions']} | {r['n_uav']:,} | {r['method']} | {100 * r['optimality_gap']:.2f} +- "
            f"{100 * r['gap_ci95']:.2f} | {r['time_s']:.4g} | {r.get('milp_s', float('nan')):.4g} | "
            f"{r['seeds']}, {r['scenes']} | {r['reference_optimal']} |"
        )
    out += [
        "",
        "| distribution | UAVs | model-based method | gap % | s / scene | on the frontier | "
        "dominated by | gap <= lap's |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v in lines:
        out.append(
            f"| {v['positions']} | {v['n_uav']:,} | {v['method']} | {v['gap_pct']:.2f} | {v['time_s']:.4g} | "
            f"{'yes' if v['on_frontier'] else 'no'} | {v['dominated_by']} | {v['at_most_lap']} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", default="pretrained")
    parser.add_argument("--scales", type=int, nargs="+", default=[16, 256, 1024, 4096, 16384])
    parser.add_argument("--positions", nargs="+", default=["uniform", "clustered"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("outputs/frontier"))
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the evaluation (eval.*, data.cache_dir...)")
    args = parser.parse_args()
    means = aggregate(score_sets(args))
    lines = verdicts(means)
    write_json(
        args.out / "frontier.json", {"checkpoint": args.ckpt, "seeds": args.seeds, "rows": means, "verdicts": lines}
    )
    (args.out / "frontier.md").write_text(markdown(means, lines))
    plot_frontier(means, args.out / "frontier.png")
    print(markdown(means, lines))


if __name__ == "__main__":
    main()
