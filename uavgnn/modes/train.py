"""``mode=train`` (the default): train the configured algorithm, then run its test phase on the best weights.

The checks before any write (resume config, history, the checkpoint restored in full), then the shared
loop (``uavgnn.training``), then ``Algorithm.test``: its table, pictures and ``summary.json``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import OmegaConf

from uavgnn.algorithms.checkpoint_config import stored_config
from uavgnn.algorithms.registry import algorithm_class, describe
from uavgnn.config.schemas import Config
from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.console import echo
from uavgnn.infrastructure.errors import Interrupted
from uavgnn.infrastructure.storage import remove_stale_temps, storage_error
from uavgnn.loggers import open_logger
from uavgnn.runs import requeue
from uavgnn.runs.checkpoints import load_checkpoint, load_weights
from uavgnn.runs.directory import accept, clear_failure_records, continue_command
from uavgnn.training.resume import check_history, check_resume_config, finished_score, resume_checkpoint
from uavgnn.training.trainer import Trainer

log = logging.getLogger(__name__)


def run_train(cfg: Config, out_dir: Path) -> float:
    """Train, run the algorithm's test phase, write the summary; returns the best validation score (what a
    sweeper minimises)."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise storage_error(out_dir, err) from None
    try:
        return _train_and_test(cfg, out_dir)
    except Interrupted as err:
        raise Interrupted(
            f"{err}; resume with: {continue_command(out_dir, 'resume=auto')}", err.exit_code, err.saved_step
        ) from None


def _train_and_test(cfg: Config, out_dir: Path) -> float:
    main = distributed.context().is_main  # under torchrun the other ranks share rank 0's directory
    config = OmegaConf.to_container(cfg, resolve=True)
    distributed.same_config_on_every_rank(config)
    # the scheduler stopped this job and started it again: it resumes (rank 0 reads the record for every rank)
    requeued = distributed.broadcast_from_main(requeue.pending(out_dir) if main else None)
    if requeued:
        echo(f"requeued after it stopped at step {requeued['step']} ({requeued.get('why')}): resuming", err=True)
    elif str(cfg.resume).lower() == "auto":  # the same command again (a sweep killed anywhere): done is done
        score = distributed.broadcast_from_main(finished_score(out_dir, config) if main else None)
        if score is not None:
            if main:
                clear_failure_records(out_dir)
            echo(
                f"{out_dir}: finished already with these settings (summary.json at step {cfg.train.steps}): "
                "not run again"
            )
            return score
    algorithm = algorithm_class(cfg.algorithm.name)
    resume_from = resume_checkpoint(
        "auto" if requeued else cfg.resume, out_dir, refuse_existing_run=main, config=config, algorithm=algorithm
    )
    resume_step, safe_changes = None, {}
    if resume_from is not None:  # checked before the directory is touched: a refused resume changes nothing
        stored = load_checkpoint(resume_from)
        resume_step = stored["state"]["step"]
        safe_changes = check_resume_config(
            resume_from, OmegaConf.to_container(stored_config(stored["config"]), resolve=True), config, algorithm
        )
        check_history(out_dir, resume_from, stored)
    trainer = Trainer(cfg, out_dir, resume_from)  # restores every part of the checkpoint, writes nothing
    accept(out_dir, cfg)  # every check passed: the run writes from here on
    if main:
        clear_failure_records(out_dir)  # an earlier attempt's: superseded by this one
        remove_stale_temps(out_dir)
        requeue.done(out_dir)
    logger = open_logger(cfg, out_dir, resume_step=resume_step, enabled=main)
    try:
        if resume_from is not None:
            logger.event("resume", resume_step, changed={key: list(change) for key, change in safe_changes.items()})
        result = trainer.fit(logger)
        if not distributed.context().is_main:
            return float(result.state.best)  # rank 0 tests and reports
        best = load_checkpoint(result.best_path, trainer.device)
        load_weights(result.model, best["policy"], result.best_path, describe(best["config"]))
        return trainer.algorithm.test(result, out_dir, logger)
    finally:
        logger.finish()
