"""``mode=train`` (the default): train, then compare the best model with the baselines on the test set.

Prints the summary table and writes ``summary.json`` and ``test_scene.png``
(one test scene with the model's assignment) into the run directory.
"""

from __future__ import annotations

import logging
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

from uavgnn import distributed
from uavgnn.config import Config, env_settings, scene_distribution
from uavgnn.console import echo
from uavgnn.data.splits import load_split
from uavgnn.dynamics.evaluation import compare_on_test, plot_predictions
from uavgnn.envs.evaluation import compare_policies
from uavgnn.envs.render import episode_gif, plot_episodes, plot_learning_curve
from uavgnn.errors import Interrupted
from uavgnn.evaluation.methods import compare_on_split
from uavgnn.loggers import MetricLogger, read_history, run_name
from uavgnn.plots import plot_assignment
from uavgnn.problem.graphs import GraphSettings
from uavgnn.report import format_table, write_json
from uavgnn.runtime import amp_dtype, resolve_device
from uavgnn.storage import remove_stale_temps, storage_error
from uavgnn.training.checkpoint import load_checkpoint
from uavgnn.training.resume import check_resume_config, resume_checkpoint
from uavgnn.training.trainer import train

log = logging.getLogger(__name__)


def swept_keys(sweep_dir: Path) -> set[str]:
    """Keys the sweep varies (``model=tiny,small``, ``x=range(...)``), from the sweep's multirun.yaml."""
    path = sweep_dir / "multirun.yaml"
    if not path.exists():
        return set()
    task = OmegaConf.load(path).hydra.overrides.task
    return {o.split("=")[0] for o in map(str, task) if "," in o.split("=", 1)[-1] or "(" in o.split("=", 1)[-1]}


def sweep_context() -> tuple[str | None, str | None, list[str]]:
    """wandb display name (a sweep job's overrides, ``model=tiny,seed=0``), group (the sweep
    directory) and tags: the chosen config-group options (``model:small``) plus short overrides."""
    if not HydraConfig.initialized():
        return None, None, []
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    group = run_name(Path(hc.sweep.dir)) if multirun else None
    overrides = [str(o) for o in hc.overrides.task if "/" not in str(o)]  # paths make poor names
    swept = swept_keys(Path(hc.sweep.dir)) if multirun else set()
    name = (",".join(o for o in overrides if o.split("=")[0] in swept) or ",".join(overrides) or None) if multirun else None
    tags = [f"{g}:{o}" for g, o in hc.runtime.choices.items() if not g.startswith("hydra") and o and g != "uavgnn_schema"]
    tags += [str(o) for o in hc.overrides.task if len(str(o)) <= 64 and "/" not in str(o)]
    return name, group, sorted(set(tags))


def resume_command(out_dir: Path) -> str:
    """The command that continues this run: the launch's overrides plus ``resume=auto`` and its directory."""
    overrides = [str(o) for o in HydraConfig.get().overrides.task] if HydraConfig.initialized() else []
    kept = [o for o in overrides if not o.startswith(("resume=", "hydra.run.dir="))]
    return " ".join(["python run.py", *kept, "resume=auto", f"hydra.run.dir={out_dir}"])


def test_on_env(cfg: Config, result, out_dir: Path, logger: MetricLogger, device) -> float:
    """The best policy against the scripted planner and random actions on fixed test episodes, with pictures."""
    agents = result.model
    settings, dist = env_settings(cfg.env), scene_distribution(cfg.task)
    name = cfg.algorithm.name
    rows, scores = compare_policies({name: agents.play}, settings, dist,
                                    cfg.env.val_episodes, device)
    echo(f"\nTest episodes: {cfg.env.val_episodes} of {settings.n_uav} UAVs, {settings.horizon} steps "
         f"({cfg.task.positions})\n" + format_table(rows))
    step = result.state.step
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


def run_train(cfg: Config, out_dir: Path) -> float:
    """Train, evaluate on the test split, write the summary; returns the best val optimality gap."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise storage_error(out_dir, err) from None
    main = distributed.context().is_main  # under torchrun the other ranks share rank 0's directory
    resume_from = resume_checkpoint(cfg.resume, out_dir, refuse_existing_run=main)
    if main:
        remove_stale_temps(out_dir)
    resume_step, safe_changes = None, {}
    if resume_from is not None:  # checked before the history is touched: a refused resume changes nothing
        stored = load_checkpoint(resume_from)
        resume_step = stored["state"]["step"]
        safe_changes = check_resume_config(resume_from, stored["config"], OmegaConf.to_container(cfg, resolve=True))
    name, group, tags = sweep_context()
    logger = MetricLogger(out_dir, cfg.logger, config=OmegaConf.to_container(cfg, resolve=True), name=name,
                          group=group, tags=tags, resume_step=resume_step, enabled=main)
    try:
        if resume_from is not None:
            logger.event("resume", resume_step, changed={key: list(change) for key, change in safe_changes.items()})
        try:
            result = train(cfg, out_dir, logger, resume_from)
        except Interrupted as err:
            raise Interrupted(f"{err}; resume with: {resume_command(out_dir)}", err.exit_code) from None
        if not distributed.context().is_main:
            return float(result.state.best_gap)  # rank 0 tests and reports
        device = resolve_device(cfg.hardware.device)
        model = result.model
        model.load_state_dict(load_checkpoint(result.best_path, device)["policy"])
        if cfg.algorithm.name in ("masac", "coma"):
            return test_on_env(cfg, result, out_dir, logger, device)
        if cfg.algorithm.name == "dynamics":
            return test_dynamics(cfg, result, out_dir, logger, result.workload)
        test_store = load_split(cfg, "test")
        graph = GraphSettings.from_config(cfg.data)
        rows, evaluation = compare_on_split(model, test_store, cfg.eval.decoder, graph.k(cfg.data.n_uav), device,
                                            graph.k_max, graph.uav_neighbours, amp_dtype(cfg, device),
                                            cfg.eval.samples, cfg.eval.repair)
        echo(f"\nTest set: {len(test_store)} scenes of {cfg.data.n_uav} UAVs ({cfg.task.positions})\n"
             + format_table(rows, ["method", "reward", "completion_score", "efficiency", "optimality_gap",
                                   "infeasible", "time_s", "note"]))
        plot = plot_assignment(test_store.scene(0), evaluation.assignments[0], out_dir / "test_scene.png",
                               title=f"{cfg.model.name} model, gap "
                                     f"{evaluation.metrics['optimality_gap'][0]:.3f} vs MILP")
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
