"""The command line's configs and runs from Python: a config composed as ``uavgnn <overrides>`` composes it
(``compose_config``: scripts, benchmarks, tests), and the run it makes (``run``: ``uavgnn.api.train``), run as
Hydra runs a job, with uavgnn's checks of the run directory, its lock and ``run.log``."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path

from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from uavgnn.config import register_configs
from uavgnn.infrastructure.console import attach_run_log
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.program.composition import COMPOSITION_ERRORS, composition_error
from uavgnn.program.job import run_mode


def compose_config(overrides: Sequence[str] = ()) -> DictConfig:
    """The config ``uavgnn <overrides>`` runs with, from the packaged configs with every schema registered (the
    algorithms' and plug-ins' too); an override that does not compose is a ``ConfigError`` with the command line's
    line."""
    from hydra import compose, initialize_config_module

    register_configs()
    with initialize_config_module("uavgnn.conf", version_base="1.3", job_name="run"):
        try:
            return compose("config", overrides=list(overrides))
        except COMPOSITION_ERRORS as err:
            raise ConfigError(composition_error(err)) from None


def run(overrides: Sequence[str], run_directory: str | Path | None = None) -> Path:
    """The run ``uavgnn <overrides>`` makes, from Python (``uavgnn.api.train``): composed by Hydra's compose API
    from the packaged configs, then run as Hydra runs a job (uavgnn's checks of the run directory and its lock,
    Hydra's job logging with ``run.log``, ``run_mode``), in the same directory (``run_directory``: as
    ``hydra.run.dir=``); returns it. A user error is raised as itself once its line is said (an override that does
    not compose: a ``ConfigError`` with the command line's line), a refused run's directory removed; the caller's
    logging and Hydra state are its own again after."""
    from hydra import compose, initialize_config_module
    from hydra._internal.callbacks import Callbacks
    from hydra.core.utils import run_job
    from hydra.types import HydraContext

    hydra_overrides = ["hydra.mode=RUN"]  # as the command line's (Hydra's run mode, recorded in hydra.yaml)
    if run_directory is not None:
        plain = re.fullmatch(r"[\w./@:+-]+", str(run_directory))  # as typed on a command line, else quoted
        quoted = "'" + str(run_directory).replace("'", "\\'") + "'"
        hydra_overrides.append(f"hydra.run.dir={run_directory if plain else quoted}")
    register_configs()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level  # the run's logging (run.log) is the caller's again after it
    hydra_config = HydraConfig.instance().cfg  # a Hydra app's own, if the caller is one
    failed: list[Exception] = []

    def task(cfg: DictConfig) -> float | None:
        try:
            return run_mode(cfg, exits=False)
        except Exception as err:
            failed.append(err)  # raised below as itself (Hydra would print the job's overrides first)
            raise

    try:
        with initialize_config_module("uavgnn.conf", version_base="1.3", job_name="run"):
            try:
                cfg = compose("config", overrides=[*overrides, *hydra_overrides], return_hydra_config=True)
            except COMPOSITION_ERRORS as err:
                raise ConfigError(composition_error(err)) from None
            callbacks = Callbacks(cfg)  # as Hydra's own run: uavgnn's checks of the run directory and its lock
            callbacks.on_run_start(config=cfg, config_name="config")
            context = HydraContext(config_loader=GlobalHydra.instance().config_loader(), callbacks=callbacks)
            job = run_job(
                hydra_context=context, task_function=task, config=cfg, job_dir_key="hydra.run.dir", job_subdir_key=None
            )
            callbacks.on_run_end(config=cfg, config_name="config", job_return=job)
            if failed:
                raise failed[0]
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)
        attach_run_log()  # the finished run's run.log no longer hears what this process says
        HydraConfig.instance().cfg = hydra_config
    return Path(job.hydra_cfg.hydra.runtime.output_dir)
