"""The command line: ``uavgnn ...``, ``python -m uavgnn ...`` and ``python run.py ...`` are the same program.

The configs ship inside the package (``uavgnn/conf``), so an installed uavgnn
runs from any directory; run directories land under the current directory.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from uavgnn import distributed, sweep_worker
from uavgnn.algorithms import register_configs
from uavgnn.app import run_mode
from uavgnn.console import echo
from uavgnn.errors import ConfigError

try:  # before Hydra composes; a launcher's workers import this module too
    register_configs()
except ConfigError as err:  # an algorithm plug-in that does not load: one line, as every user error
    echo(f"error: {err}", err=True)
    raise SystemExit(2) from None


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> float | None:
    return run_mode(cfg)


def main() -> None:
    """Console-script entry point: join ``torchrun``'s process group (if any), then let Hydra parse the arguments."""
    sweep_worker.mark_main()  # a launcher's workers inherit it: they know they are workers
    distributed.init_from_launcher()  # before Hydra: every rank must agree on the run directory
    try:
        _hydra_main()
    finally:
        distributed.shutdown()
