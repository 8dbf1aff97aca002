"""``mode=solve``: solve one scene (a file or a generated one) and write checkable results.

Writes ``scene.json`` (the scene in the documented file format),
``assignment.json`` (assignment + solver status) and ``metrics.json`` into
the run directory, so any result can be verified independently.
"""

from __future__ import annotations

import logging
from pathlib import Path

from uavgnn.config import Config, scene_distribution
from uavgnn.metrics import assignment_metrics, mean_metrics
from uavgnn.report import format_table, write_json
from uavgnn.scene_io import load_scene, save_scene
from uavgnn.scenes import Scene, generate_scenes
from uavgnn.solvers import SolveResult, solve, solve_milp

log = logging.getLogger(__name__)


def load_or_generate_scene(cfg: Config) -> Scene:
    if cfg.task.file:
        scene, _ = load_scene(cfg.task.file)
        return scene
    return generate_scenes(scene_distribution(cfg.task), cfg.solve.n_uav, 1, cfg.seed)[0]


def run_solve(cfg: Config, out_dir: Path, result: SolveResult | None = None) -> dict[str, float]:
    """Solve with ``cfg.solver`` (or take ``result`` from the model), report and write files."""
    scene = load_or_generate_scene(cfg)
    log.info("scene: %d UAVs, %d targets", scene.n_uav, scene.n_target)
    if result is None:
        result = solve(scene, cfg.solver, time_limit=cfg.solve.time_limit)
    optimum = None
    if result.solver == "milp" and result.is_optimal:
        optimum = result.objective
    elif cfg.solve.gap_reference:
        reference = solve_milp(scene, time_limit=cfg.solve.time_limit)
        optimum = reference.objective
        if not reference.is_optimal:
            log.warning("reference MILP stopped with status %s: optimality_gap is against its best objective",
                        reference.status)
    metrics = mean_metrics(assignment_metrics([scene], [result.assignment], None if optimum is None else [optimum]))
    metrics["wall_time_s"] = result.wall_time
    save_scene(out_dir / "scene.json", scene)
    write_json(out_dir / "assignment.json", result.to_json())
    write_json(out_dir / "metrics.json", {"solver": result.solver, "status": result.status, **metrics})
    print(format_table([{"solver": result.solver, "status": result.status, **metrics}]))
    print(f"results in {out_dir}")
    return metrics
