"""uavgnn entry point: compose the Hydra config and run its mode (train, eval, solve, cache, compare)."""

import hydra
from omegaconf import DictConfig

from uavgnn import distributed
from uavgnn.app import run_mode
from uavgnn.config import register_configs

register_configs()


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    return run_mode(cfg)


if __name__ == "__main__":
    distributed.init_from_torchrun()  # before Hydra: every rank must agree on the run directory
    try:
        main()
    finally:
        distributed.shutdown()
