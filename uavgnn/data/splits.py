"""Fixed-seed train/val/test splits from the config.

Seeds are ``data.<split>_seed + n_uav``: the three bases are a million apart,
so the splits never share a generator seed, and every scale of a split (the
transfer test sets included) has its own seed.
"""

from __future__ import annotations

from omegaconf import DictConfig

from uavgnn.data.cache import BuildSettings, SplitSpec, load_or_build
from uavgnn.data.store import GraphStore
from uavgnn.problem.scenes import SceneDistribution

SPLITS = ("train", "val", "test")


def split_spec(cfg: DictConfig, split: str, n_uav: int | None = None, count: int | None = None) -> SplitSpec:
    if split not in SPLITS:
        raise ValueError(f"split: unknown split {split!r} (expected one of {', '.join(SPLITS)})")
    n_uav = cfg.data.n_uav if n_uav is None else n_uav
    count = getattr(cfg.data, f"{split}_scenes") if count is None else count
    return SplitSpec(split, n_uav, count, getattr(cfg.data, f"{split}_seed") + n_uav)


def build_settings(cfg: DictConfig) -> BuildSettings:
    return BuildSettings(k_max=cfg.data.k_max, uav_neighbours=cfg.data.uav_neighbours,
                         label_time_limit=cfg.data.label_time_limit)


def load_split(cfg: DictConfig, split: str, n_uav: int | None = None, count: int | None = None) -> GraphStore:
    """The split's graphs from the cache (or built), honouring ``optim.graph_cache``."""
    return load_or_build(split_spec(cfg, split, n_uav, count), SceneDistribution.of(cfg.task), build_settings(cfg),
                         cfg.data.cache_dir, workers=cfg.data.label_workers, use_cache=cfg.optim.graph_cache)
