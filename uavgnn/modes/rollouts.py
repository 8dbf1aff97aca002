"""``mode=rollouts``: build (or find in the cache) the datasets an algorithm simulates, ahead of training.

    python run.py mode=rollouts algorithm=dynamics [algorithm.rollout_policy=random|PATH/best.pt]

The algorithm says what it builds (``Algorithm.prepare``): for the dynamics model, one line per split
(train, val, test, test_ood): sequences, rows, episodes, scored windows, hidden disturbance size; training
then finds them in ``data.cache_dir``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from uavgnn.algorithms.registry import make_algorithm
from uavgnn.config.schemas import Config


def run_rollouts(cfg: Config, out_dir: Path) -> list[dict[str, object]]:
    """Build or load every dataset of the configured algorithm; returns the table it prints."""
    return make_algorithm(cfg, torch.device("cpu")).prepare()
