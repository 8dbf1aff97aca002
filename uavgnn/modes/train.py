"""``mode=train`` (the default): train, then compare the best model with the baselines on the test set.

Prints the summary table and writes ``summary.json`` and ``test_scene.png``
(one test scene with the model's assignment) into the run directory.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from uavgnn import distributed, run_dir
from uavgnn.config import Config, env_settings, scene_distribution
from uavgnn.console import echo, launched_as
from uavgnn.data.splits import load_split
from uavgnn.dynamics.evaluation import compare_on_test, plot_predictions
from uavgnn.envs.evaluation import compare_policies
from uavgnn.envs.render import episode_gif, plot_episodes, plot_learning_curve
from uavgnn.errors import Interrupted
from uavgnn.evaluation.methods import compare_on_split
from uavgnn.loggers import MetricLogger, open_logger, read_history
from uavgnn.plots import plot_assignments
from uavgnn.problem.graphs import GraphSettings
from uavgnn.report import count, format_table, write_json
from uavgnn.runtime import amp_dtype, resolve_device
from uavgnn.storage import remove_stale_temps, storage_error
from uavgnn.training.checkpoint import load_checkpoint, load_weights
from uavgnn.training.resume import check_history, check_resume_config, resume_checkpoint
from uavgnn.training.trainer import Trainer

log = logging.getLogger(__name__)


def resume_command(out_dir: Path) -> str:
    """The command that continues this run: the launch's overrides plus ``resume=auto`` and its directory."""
    overrides = [str(o) for o in HydraConfig.get().overrides.task] if HydraConfig.initialized() else []
    kept = [o for o in overrides if not o.startswith(("resume=", "hydra.run.dir="))]
    return " ".join([launched_as(), *kept, "resume=auto", f"hydra.run.dir={out_dir}"])


def test_on_env(cfg: Config, result, out_dir: Path, logger: MetricLogger, device) -> float:
    """The best policy against the scripted planner and random actions on fixed test episodes, with pictures."""
    agents = result.model
    settings, dist = env_settings(cfg.env), scene_distribution(cfg.task)
    name = cfg.algorithm.name
    rows, scores = compare_policies({name: agents.play}, settings, dist,
                                    cfg.env.val_episodes, device)
    echo(f"\nTest episodes: {count(cfg.env.val_episodes, 'episode')} of {count(settings.n_uav, 'UAV')}, "
         f"{settings.horizon} steps "
         f"({cfg.task.positions})\n" + format_table(rows))
    step = result.state.step
    logger.table("test/methods", rows, step)
    logger.log_image("test/trajectories", plot_episodes(scores, settings.service_radius, out_dir / "trajectories.png"),
                     step)
    episode_gif(scores[name], settings.service_radius, out_dir / "episode.gif")
    logger.log_image("train/learning_curve", plot_learning_curve(read_history(out_dir), out_dir / "learning_curve.png"),
                     step)
    test = {f"test/{key}": value for key, value in rows[0].items() if isinstance(value, float)}
    write_json(out_dir / "summary.json", {"best_val_planner_gap": result.state.best_gap, "final_val": result.val,
                                          "test": rows, "steps": step, "params": agents.num_parameters(), **test,
                                          **result.perf})
    logger.summary({"best/val/planner_gap": result.state.best_gap, **test, **result.perf})
    echo(f"results in {out_dir}")
    return float(result.state.best_gap)


def test_dynamics(cfg: Config, result, out_dir: Path, logger: MetricLogger, work) -> float:
    """The best TCN against the constant-velocity baseline on the test splits (in and out of the training
    disturbances), with the predicted-vs-true picture."""
    rows = compare_on_test(result.model, work)
    echo(f"\nTest rollouts ({cfg.algorithm.rollout_policy} policy; test_ood: wind and drag x{cfg.algorithm.ood_scale})\n"
         + format_table(rows))
    step = result.state.step
    logger.table("test/methods", rows, step)
    logger.log_image("test/predictions", plot_predictions(result.model, work, "test_ood", out_dir / "predictions.png"),
                     step)
    test = {f"test/{row['split']}/{key}": value for row in rows if row["method"] == "tcn"
            for key, value in row.items() if isinstance(value, float)}
    write_json(out_dir / "summary.json", {"best_val_k_step_rmse": result.state.best_gap, "final_val": result.val,
                                          "test": rows, "steps": step, "params": result.model.num_parameters(),
                                          **test, **result.perf})
    logger.summary({"best/val/k_step_rmse": result.state.best_gap, **test, **result.perf})
    echo(f"results in {out_dir}")
    return float(result.state.best_gap)


def first_difference(ours: list[np.ndarray], reference: list[np.ndarray]) -> int | None:
    """The first scene where two solvers' assignments differ (None if they never do)."""
    return next((i for i, (a, b) in enumerate(zip(ours, reference)) if not np.array_equal(a, b)), None)


def model_vs_milp_picture(store, evaluation, model_name: str, path: Path) -> Path:
    """The model's and the MILP's assignments side by side, on the first test scene where they differ."""
    labels = store.label_assignments()
    differs = first_difference(evaluation.assignments, labels)
    i = 0 if differs is None else differs
    note = (f"test scene {i}: the model matches the MILP on every test scene" if differs is None else
            f"test scene {i} (the first where they differ): the {model_name} model is "
            f"{evaluation.metrics['optimality_gap'][i]:.1%} below the MILP")
    return plot_assignments(store.scene(i), {f"{model_name} model": evaluation.assignments[i], "MILP": labels[i]},
                            path, note)


def run_train(cfg: Config, out_dir: Path) -> float:
    """Train, evaluate on the test split, write the summary; returns the best val optimality gap."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise storage_error(out_dir, err) from None
    try:
        return _train_and_test(cfg, out_dir)
    except Interrupted as err:
        raise Interrupted(f"{err}; resume with: {resume_command(out_dir)}", err.exit_code) from None


def _train_and_test(cfg: Config, out_dir: Path) -> float:
    main = distributed.context().is_main  # under torchrun the other ranks share rank 0's directory
    resume_from = resume_checkpoint(cfg.resume, out_dir, refuse_existing_run=main)
    resume_step, safe_changes = None, {}
    if resume_from is not None:  # checked before the directory is touched: a refused resume changes nothing
        stored = load_checkpoint(resume_from)
        resume_step = stored["state"]["step"]
        safe_changes = check_resume_config(resume_from, stored["config"], OmegaConf.to_container(cfg, resolve=True))
        check_history(out_dir, resume_from, stored)
    trainer = Trainer(cfg, out_dir, resume_from)  # restores every part of the checkpoint, writes nothing
    run_dir.accept(out_dir, cfg)  # every check passed: the run writes from here on
    if main:
        remove_stale_temps(out_dir)
    logger = open_logger(cfg, out_dir, resume_step=resume_step, enabled=main)
    try:
        if resume_from is not None:
            logger.event("resume", resume_step, changed={key: list(change) for key, change in safe_changes.items()})
        result = trainer.fit(logger)
        if not distributed.context().is_main:
            return float(result.state.best_gap)  # rank 0 tests and reports
        device = resolve_device(cfg.hardware.device)
        model = result.model
        best = load_checkpoint(result.best_path, device)
        load_weights(model, best["policy"], result.best_path, best["config"])
        if cfg.algorithm.name in ("masac", "coma"):
            return test_on_env(cfg, result, out_dir, logger, device)
        if cfg.algorithm.name == "dynamics":
            return test_dynamics(cfg, result, out_dir, logger, result.workload)
        test_store = load_split(cfg, "test")
        graph = GraphSettings.from_config(cfg.data)
        rows, evaluation = compare_on_split(model, test_store, cfg.eval.decoder, graph, graph.k(cfg.data.n_uav),
                                            device, amp_dtype(cfg, device), cfg.eval.samples, cfg.eval.repair,
                                            cfg.eval.guided_keep, cfg.eval.milp_time_limit)
        echo(f"\nTest set: {count(len(test_store), 'scene')} of {count(cfg.data.n_uav, 'UAV')} ({cfg.task.positions})\n"
             + format_table(rows, ["method", "reward", "completion_score", "efficiency", "optimality_gap",
                                   "infeasible", "time_s", "note"]))
        plot = model_vs_milp_picture(test_store, evaluation, cfg.model.name, out_dir / "test_scene.png")
        logger.table("test/methods", rows, result.state.step)
        logger.log_image("test/scene", plot, result.state.step)
        test = {f"test/{key}": value for key, value in rows[0].items() if isinstance(value, float)}
        summary = {"best_val_optimality_gap": result.state.best_gap, "final_val": result.val, "test": rows,
                   "steps": result.state.step, "params": model.num_parameters(), **test, **result.perf}
        write_json(out_dir / "summary.json", summary)
        logger.summary({"best/val/optimality_gap": result.state.best_gap, **test, **result.perf})
        echo(f"results in {out_dir}")
        return float(result.state.best_gap)
    finally:
        logger.finish()
