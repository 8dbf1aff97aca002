"""Dispatch a composed config to its mode; user errors end with a one-line message."""

from __future__ import annotations

import logging
import sys
import traceback
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from uavgnn import distributed
from uavgnn.config import validate
from uavgnn.errors import ConfigError, ProblemTooLarge, SceneFileError, TrainingDiverged
from uavgnn.report import write_json

log = logging.getLogger(__name__)
USER_ERRORS = (ConfigError, SceneFileError, ProblemTooLarge, TrainingDiverged, FileNotFoundError)


def run_mode(cfg: DictConfig) -> float | None:
    """Run ``cfg.mode``. In a multirun a failing job writes ``failed.json`` and returns NaN
    to the sweeper instead of ending the sweep."""
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        try:
            return _dispatch(cfg, out_dir)
        except Exception as err:  # noqa: BLE001 - one job's failure must not stop the sweep
            log.error("job failed: %s: %s", type(err).__name__, err)
            write_json(out_dir / "failed.json", {"error": f"{type(err).__name__}: {err}",
                                                 "traceback": traceback.format_exc(),
                                                 "config": OmegaConf.to_container(cfg, resolve=False)})
            return float("nan")
    try:
        return _dispatch(cfg, out_dir)
    except USER_ERRORS as err:
        log.error("%s", err)
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def _dispatch(cfg: DictConfig, out_dir: Path) -> float | None:
    distributed.quiet_other_ranks()
    validate(cfg)
    if cfg.mode == "cache":
        from uavgnn.modes.cache import run_cache
        if run_cache(cfg):
            raise SystemExit(1)
        return None
    if cfg.mode == "train":
        from uavgnn.modes.train import run_train
        return run_train(cfg, out_dir)
    if cfg.mode == "eval":
        from uavgnn.modes.evaluate import run_eval
        run_eval(cfg, out_dir)
        return None
    if cfg.mode == "compare":
        from uavgnn.modes.compare import run_compare
        run_compare(cfg, out_dir)
        return None
    if cfg.mode == "solve":
        from uavgnn.modes.solve import run_solve
        run_solve(cfg, out_dir)
        return None
    if cfg.mode == "info":
        from uavgnn.modes.info import run_info
        run_info(cfg, out_dir)
        return None
    if cfg.mode == "profile":
        from uavgnn.modes.profile import run_profile
        run_profile(cfg, out_dir)
        return None
    if cfg.mode == "benchmark":
        from uavgnn.modes.benchmark import run_benchmark
        run_benchmark(cfg, out_dir)
        return None
    raise ConfigError(f"mode: unknown mode {cfg.mode!r}")
