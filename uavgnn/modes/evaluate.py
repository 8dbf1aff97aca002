"""``mode=eval ckpt=PATH``: a checkpoint against greedy, lap and the MILP at every ``eval.scales`` size."""

from __future__ import annotations

from pathlib import Path

from uavgnn.config import Config
from uavgnn.data.splits import load_split
from uavgnn.errors import ConfigError
from uavgnn.graphs import adaptive_k
from uavgnn.modes.compare_methods import compare_on_split
from uavgnn.report import format_table, write_json
from uavgnn.training.checkpoint import load_model
from uavgnn.training.trainer import resolve_device


def run_eval(cfg: Config, out_dir: Path) -> list[dict]:
    if not cfg.ckpt:
        raise ConfigError("mode=eval needs ckpt=PATH (a best.pt or last.pt from a training run)")
    device = resolve_device(cfg.hardware.device)
    model, _ = load_model(cfg.ckpt, device)
    rows = []
    for n_uav in cfg.eval.scales:
        store = load_split(cfg, "test", n_uav=n_uav)
        k = adaptive_k(n_uav, cfg.data.k_min, cfg.data.k_divisor, cfg.data.k_max)
        scale_rows, _ = compare_on_split(model, store, cfg.eval.decoder, k, device, cfg.data.k_max,
                                         cfg.data.uav_neighbours)
        rows += [{"n_uav": n_uav, "positions": cfg.task.positions, **row} for row in scale_rows]
    print(format_table(rows, ["n_uav", "method", "reward", "completion_score", "efficiency", "optimality_gap",
                              "infeasible", "time_s", "note"]))
    write_json(out_dir / "eval.json", rows)
    print(f"results in {out_dir}")
    return rows
