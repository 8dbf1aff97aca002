"""Dispatch a composed config to its mode; user errors end with a one-line message."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from uavgnn.scene_io import SceneFileError
from uavgnn.solvers import ProblemTooLarge

log = logging.getLogger(__name__)
USER_ERRORS = (SceneFileError, ProblemTooLarge, ValueError, FileNotFoundError)


def run_mode(cfg: DictConfig) -> float | None:
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        if cfg.mode == "cache":
            from uavgnn.modes.cache import run_cache
            if run_cache(cfg):
                raise SystemExit(1)
            return None
        if cfg.mode == "solve":
            from uavgnn.modes.solve import run_solve
            run_solve(cfg, out_dir)
            return None
        raise ValueError(f"mode: unknown mode {cfg.mode!r} (expected train, eval, solve or cache)")
    except USER_ERRORS as err:
        log.error("%s", err)
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
