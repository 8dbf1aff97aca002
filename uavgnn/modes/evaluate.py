"""``mode=eval ckpt=PATH``: zero-shot evaluation of a checkpoint at every ``eval.scales`` size.

For each test distribution (``eval.positions``) and scale, a fixed-seed cached
test split (``min(data.test_scenes, eval.max_total_uavs // scale)`` scenes,
labelled by the MILP with ``eval.milp_time_limit`` per scene) is solved by the
model, greedy, lap (where its dense matrix fits) and the MILP. The optimality
gap is measured against the MILP's objective only where the MILP proved it
optimal: a scale where it stopped at ``eval.milp_time_limit`` on any scene
has no gap (NaN, left out of ``transfer.png``), with a warning; the column
``reference_optimal`` says on how many scenes the reference is proven.
The model's time is split into graph build, forward and decode; ``optim.amp=true``
runs the forward under autocast (bf16 on the CPU).

``transfer_ratio`` = model score at a scale / model score at the training
size, with score = ``1 - optimality_gap``; below 0.5 the original guide's
"zero-shot transfer failed" warning is raised.

Robustness to distribution shift (issue 16): at the training size, the test set
of the task the model was trained on (``in-distribution``) and every
``eval.shifts`` set (task=uniform with some fields changed; fixed, whatever the
training task) are solved by every method; ``transfer.json["shifts"]`` gives each
set's gaps, whether the model beats greedy, and its gap minus the in-distribution
gap (``shift_cost``; the acceptance asks <= 0.02). Writes ``transfer.json``,
``eval.json`` (the rows), ``transfer.png``, ``shifts.png`` and ``frontier.png`` (gap against time per
scene, every method, one panel per scale: with the ``sampled (best of eval.best_of)`` row, the quality each
method buys with its time), and logs the tables and the pictures to the configured dashboard.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from uavgnn.algorithms import describe, making, produces
from uavgnn.algorithms.env_policy import PRODUCT as ENV_POLICY
from uavgnn.algorithms.scene_policy import PRODUCT as ASSIGNMENT_POLICY
from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.configuration.schemas import Config
from uavgnn.evaluation.environment import run_env_eval
from uavgnn.evaluation.test_sets import SetScorer
from uavgnn.infrastructure.console import echo
from uavgnn.infrastructure.device import prepare_device
from uavgnn.infrastructure.errors import CheckpointError, ConfigError
from uavgnn.infrastructure.storage import write_json
from uavgnn.loggers.metric_logger import publish
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.reporting.pictures import plot_frontier, plot_shifts, plot_transfer
from uavgnn.reporting.tables import format_table
from uavgnn.runs.checkpoints import load_checkpoint
from uavgnn.runs.layout import EVAL, FRONTIER_PICTURE, SHIFTS_PICTURE, TRANSFER, TRANSFER_PICTURE

log = logging.getLogger(__name__)
TRANSFER_FAILED = 0.5  # the original guide's threshold on transfer_ratio
IN_DISTRIBUTION = "in-distribution"


def run_eval(cfg: Config, out_dir: Path) -> dict:
    if not cfg.ckpt:
        raise ConfigError("mode=eval needs ckpt=PATH (a best.pt or last.pt from a training run)")
    stored = load_checkpoint(cfg.ckpt)["config"]
    if produces(stored) == ENV_POLICY:
        return run_env_eval(cfg, out_dir)
    if produces(stored) != ASSIGNMENT_POLICY:
        raise CheckpointError(
            f"checkpoint {cfg.ckpt} ({describe(stored)}): mode=eval takes an assignment policy "
            f"({making(ASSIGNMENT_POLICY)}) or an environment policy ({making(ENV_POLICY)})"
        )
    device = prepare_device(cfg)
    model, graph, trained_cfg = load_policy(cfg.ckpt, device, "mode=eval ckpt")
    deciding = (("capacity_iters", "iters"), ("capacity_fill", "fill"), ("commit_stages", "stages"))
    for key, field in deciding:  # e.g. a checkpoint saved before a setting existed
        if cfg.eval[key] is not None:
            model.balancing = replace(model.balancing, **{field: cfg.eval[key]})
    if cfg.eval.k_max is not None:  # e.g. more candidates in large scenes than a checkpoint was trained with
        graph = replace(graph, k_max=cfg.eval.k_max)
    train_size = int(trained_cfg["data"]["n_uav"])
    own = OmegaConf.to_container(cfg.task)
    if cfg.task.get("folder"):  # your own test scenes, as they are: no scales, no positions
        labels, tests = ["folder"], [("folder", own, train_size)]
    else:
        labels, scales = list(cfg.eval.positions), sorted({train_size, *cfg.eval.scales})
        tests = [
            (positions, {**own, "positions": positions, "name": positions}, n_uav)
            for positions in labels
            for n_uav in scales
        ]
    shift_sets = [(name, task, train_size) for name, task in _shift_tasks(cfg, trained_cfg["task"]).items()]
    scorer = SetScorer(cfg, model, graph, device)
    scored = scorer.run(tests + shift_sets)
    rows = [{"positions": label, **row} for (label, _, _), set_rows in zip(tests, scored) for row in set_rows]
    shifts = [
        {"test_set": label, **row}
        for (label, _, _), set_rows in zip(shift_sets, scored[len(tests) :])
        for row in set_rows
    ]
    transfer = []
    for positions in [] if cfg.task.get("folder") else labels:  # transfer across scales: none in a folder
        model_rows = {r["n_uav"]: r for r in rows if r["positions"] == positions and r["method"].startswith("model (")}
        base = 1 - model_rows[train_size]["optimality_gap"]
        for n_uav, row in model_rows.items():
            ratio = (1 - row["optimality_gap"]) / base if base > 0 else float("nan")
            row["transfer_ratio"] = ratio
            transfer.append({"positions": positions, "n_uav": n_uav, "transfer_ratio": ratio})
            if ratio < TRANSFER_FAILED:
                log.warning(
                    "zero-shot transfer failed: %s scenes of %d UAVs score %.2f x the training size's",
                    positions,
                    n_uav,
                    ratio,
                )
    echo(
        format_table(
            rows,
            [
                "positions",
                "n_uav",
                "scenes",
                "method",
                "reward",
                "completion_score",
                "efficiency",
                "optimality_gap",
                "gap_ci95",
                "reference_optimal",
                "transfer_ratio",
                "time_s",
                "build_s",
                "forward_s",
                "decode_s",
                "milp_s",
                "note",
            ],
        )
        + "\ngap_ci95: half-width of the 95% interval of the mean gap over the test scenes"
    )
    summary = shift_summary(shifts)
    if summary:
        echo(
            format_table(
                summary,
                ["test_set", "scenes", *(f"{name}_gap" for name in SHIFT_COLUMNS), "beats_greedy", "shift_cost"],
            )
        )
    report = {
        "checkpoint": str(cfg.ckpt),
        "train_n_uav": train_size,
        "decoder": cfg.eval.decoder,
        "milp_time_limit": cfg.eval.milp_time_limit,
        "gap_reference": "proven-optimal MILP objective (NaN where the MILP hit its time limit)",
        "score": "1 - optimality_gap",
        "estimated_s": scorer.estimated_s,
        "took_s": scorer.took_s,
        "rows": rows,
        "transfer": transfer,
        "trained_task": trained_cfg["task"],
        "shift_sets": {
            IN_DISTRIBUTION: "the trained task",
            **{name: OmegaConf.to_container(cfg.eval.shifts[name]) for name in cfg.eval.shift_sets},
        },
        "shifts": summary,
        "shift_rows": shifts,
    }
    write_json(out_dir / TRANSFER, report)
    write_json(out_dir / EVAL, rows + shifts)
    plot_transfer(rows, train_size, out_dir / TRANSFER_PICTURE)
    plot_frontier(rows, out_dir / FRONTIER_PICTURE)
    pictures = {"eval/transfer_plot": out_dir / TRANSFER_PICTURE, "eval/frontier_plot": out_dir / FRONTIER_PICTURE}
    if summary:
        plot_shifts(summary, train_size, out_dir / SHIFTS_PICTURE)
        pictures["eval/shifts_plot"] = out_dir / SHIFTS_PICTURE
    headline = {f"transfer_ratio/{t['positions']}/{t['n_uav']}": t["transfer_ratio"] for t in transfer}
    headline.update({f"shift_gap/{t['test_set']}": t["model_gap"] for t in summary})
    publish(cfg, out_dir, {"eval/methods": rows, "eval/transfer": transfer, "eval/shifts": summary}, pictures, headline)
    written = [TRANSFER, TRANSFER_PICTURE, FRONTIER_PICTURE, *([SHIFTS_PICTURE] if summary else [])]
    echo(f"results in {out_dir} ({', '.join(written)})")
    return report


def _shift_tasks(cfg: Config, trained_task: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The trained task's own test set and each ``eval.shifts`` set (at the training size)."""
    if not cfg.eval.shift_sets:
        return {}
    tasks = {IN_DISTRIBUTION: {**trained_task, "file": None}}
    tasks.update(
        {
            name: {**asdict(SceneDistribution()), **cfg.eval.shifts[name], "name": name, "file": None, "folder": None}
            for name in cfg.eval.shift_sets
        }
    )
    return tasks


SHIFT_COLUMNS = ("model", "pruned", "greedy", "lap", "mcf")  # shift_summary's gaps: <name>_gap


def shift_summary(rows: list[dict]) -> list[dict]:
    """One line per test set: the gaps of the model's decision, of the model-pruned MILP (its largest keep), greedy,
    lap and min-cost flow, whether the model beats greedy, and its gap minus the in-distribution gap."""
    gaps: dict[str, dict[str, Any]] = {}
    for row in rows:
        line = gaps.setdefault(row["test_set"], {"test_set": row["test_set"], "scenes": row["scenes"]})
        method, gap = row["method"], row.get("optimality_gap", float("nan"))
        if method.startswith("model (") and "model_gap" not in line:
            line["model_gap"] = gap
        elif method.startswith("model-pruned milp"):
            line["pruned_gap"] = gap  # the rows come keep by keep: the largest last
        elif method in SHIFT_COLUMNS:
            line[f"{method}_gap"] = gap
    base = gaps.get(IN_DISTRIBUTION, {}).get("model_gap", float("nan"))
    for line in gaps.values():
        line["beats_greedy"] = bool(line["model_gap"] < line["greedy_gap"])
        line["shift_cost"] = line["model_gap"] - base
    return list(gaps.values())
