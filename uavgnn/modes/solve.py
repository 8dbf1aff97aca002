"""``mode=solve``: solve one scene (a file or a generated one) and write checkable results.

``solver=model`` runs the checkpoint on ``hardware.device`` (with ``optim.amp``
as everywhere else) and builds the graph with the checkpoint's own k rule;
``solver=guided`` lets it prune each UAV's targets to ``solve.keep`` and
solves the reduced MILP (``uavgnn.inference.guided``); ``solver=pruned`` prunes
them by a rule instead (``solve.pruner``: nearest, value, relaxation;
``uavgnn.solvers.pruned``), the control the guided MILP is measured against.

An answer not proven optimal also gets how far from the optimum it is at most:
``bound_gap`` to a certified bound (``uavgnn.solvers.bound.scene_bound``: the LP
relaxation priced against every feasible pair, or the MILP's dual bound where a
MILP stopped early and it is tighter), with the bound's kind and time.

Writes ``scene.json`` (the scene in the documented file format),
``assignment.json`` (assignment + solver status) and ``metrics.json`` into
the run directory, so any result can be verified independently.
"""

from __future__ import annotations

import logging
from pathlib import Path

from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.config.schemas import Config
from uavgnn.config.settings import scene_distribution
from uavgnn.inference.guided import solve_guided
from uavgnn.inference.scene import solve_with_model
from uavgnn.infrastructure.console import count, echo
from uavgnn.infrastructure.device import amp_dtype, prepare_device
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.infrastructure.storage import write_json
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.metrics import assignment_metrics, mean_metrics
from uavgnn.problem.scene_io import load_scene, save_scene
from uavgnn.problem.scenes import Scene
from uavgnn.reporting.tables import format_table
from uavgnn.runs.layout import ASSIGNMENT, SOLVE_METRICS, SOLVED_SCENE
from uavgnn.solvers import solve, solve_milp
from uavgnn.solvers.bound import scene_bound
from uavgnn.solvers.pruned import solve_with_pruner

log = logging.getLogger(__name__)


def load_or_generate_scene(cfg: Config) -> Scene:
    if cfg.task.file:
        scene, _ = load_scene(cfg.task.file)
        return scene
    return generate_scenes(scene_distribution(cfg), cfg.solve.n_uav, 1, cfg.seed)[0]


def run_solve(cfg: Config, out_dir: Path) -> dict[str, float]:
    """Solve with ``cfg.solver`` (``model`` uses the checkpoint ``cfg.ckpt``), report and write files."""
    scene = load_or_generate_scene(cfg)
    log.info("scene: %s, %s", count(scene.n_uav, "UAV"), count(scene.n_target, "target"))
    if cfg.solver in ("model", "guided"):
        if not cfg.ckpt:
            raise ConfigError(f"solver={cfg.solver} needs ckpt=PATH (a best.pt or last.pt from a training run)")
        device = prepare_device(cfg)
        model, graph, _ = load_policy(cfg.ckpt, device, f"mode={cfg.mode} ckpt")
        if cfg.solver == "model":
            result, timing = solve_with_model(model, scene, graph, cfg.eval.decoder, device, amp_dtype(cfg, device))
            log.info("model: build %.3f s, forward %.3f s, decode %.3f s", *timing.values())
        else:
            result, timing = solve_guided(
                model, scene, graph, cfg.solve.keep, cfg.solve.time_limit, device, amp_dtype(cfg, device)
            )
            log.info(
                "guided: model %.3f s, MILP over %d kept pairs %.3f s (%s)",
                timing["model_s"],
                timing["pairs"],
                timing["milp_s"],
                result.status,
            )
    elif cfg.solver == "pruned":
        result, timing = solve_with_pruner(scene, cfg.solve.pruner, cfg.solve.keep, cfg.solve.time_limit)
        log.info(
            "%s: scores %.3f s, MILP over %d kept pairs %.3f s (%s)",
            result.solver,
            timing["score_s"],
            timing["pairs"],
            timing["milp_s"],
            result.status,
        )
    else:
        result = solve(scene, cfg.solver, time_limit=cfg.solve.time_limit)
    optimum = None
    if result.solver == "milp" and result.is_optimal:
        optimum = result.objective
    elif cfg.solve.gap_reference:
        reference = solve_milp(scene, time_limit=cfg.solve.time_limit)
        optimum = reference.objective
        if not reference.is_optimal:
            log.warning(
                "reference MILP stopped with status %s: optimality_gap is against its best objective", reference.status
            )
    metrics = mean_metrics(assignment_metrics([scene], [result.assignment], None if optimum is None else [optimum]))
    metrics["wall_time_s"] = result.wall_time
    if not result.is_optimal:  # how far from the optimum it is at most: a certified bound, named and timed
        bound = scene_bound(scene, milp_dual=result.bound)
        metrics.update(bound=bound.value, bound_gap=(bound.value - result.objective) / max(abs(bound.value), 1e-9))
        metrics.update(bound_kind=bound.kind, bound_s=bound.seconds)
    save_scene(out_dir / SOLVED_SCENE, scene)
    write_json(out_dir / ASSIGNMENT, result.to_json())
    write_json(out_dir / SOLVE_METRICS, {"solver": result.solver, "status": result.status, **metrics})
    echo(format_table([{"solver": result.solver, "status": result.status, **metrics}]))
    echo(f"results in {out_dir}")
    return metrics
