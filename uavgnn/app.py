"""Dispatch a composed config to its mode; user errors end with a one-line message."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from uavgnn.config import validate
from uavgnn.errors import ConfigError, ProblemTooLarge, SceneFileError, TrainingDiverged

log = logging.getLogger(__name__)
USER_ERRORS = (ConfigError, SceneFileError, ProblemTooLarge, TrainingDiverged, FileNotFoundError)


def run_mode(cfg: DictConfig) -> float | None:
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
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
        if cfg.mode == "solve":
            from uavgnn.modes.solve import run_solve
            run_solve(cfg, out_dir)
            return None
        raise ConfigError(f"mode: unknown mode {cfg.mode!r} (expected train, eval, solve or cache)")
    except USER_ERRORS as err:
        log.error("%s", err)
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
