"""``mode=rollouts``: simulate (or find in the cache) the trajectory datasets of ``algorithm=dynamics``.

    python run.py mode=rollouts algorithm=dynamics [algorithm.rollout_policy=random|PATH/best.pt]

Prints one line per split (train, val, test, test_ood): sequences, rows,
episodes, scored windows, hidden disturbance size; training then finds them in
``data.cache_dir``.
"""

from __future__ import annotations

from pathlib import Path

from uavgnn.config import Config
from uavgnn.console import echo
from uavgnn.dynamics.rollouts import SPLITS, load_rollouts
from uavgnn.dynamics.windows import window_starts
from uavgnn.report import format_table


def run_rollouts(cfg: Config, out_dir: Path) -> list[dict[str, object]]:
    """Build or load every split; returns the table it prints."""
    alg = cfg.algorithm
    rows = []
    for split in SPLITS:
        payload = load_rollouts(cfg, split)
        episode = payload["episode"]
        rows.append({"split": split, "sequences": episode.shape[0], "rows": episode.shape[1],
                     "episodes": int((episode[:, -1] + 1).sum()) // cfg.env.n_uav,
                     "windows": len(window_starts(episode, alg.window + alg.predict_steps)),
                     "disturbance_rms": float(payload["disturbance"].norm(dim=-1).pow(2).mean().sqrt()),
                     "speed_mean": float(payload["vel"].norm(dim=-1).mean())})
    echo(f"rollouts of the {alg.rollout_policy} policy ({cfg.env.n_uav} UAVs, env={cfg.env.name}) in "
         f"{cfg.data.cache_dir}\n" + format_table(rows))
    return rows
