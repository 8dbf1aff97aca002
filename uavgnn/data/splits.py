"""Fixed-seed train/val/test splits from the config, or the splits of your own scene files (``task=folder``).

Seeds are ``data.<split>_seed + n_uav``: the three bases are a million apart,
so the splits never share a generator seed, and every scale of a split (the
transfer test sets included) has its own seed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from uavgnn.data.cache import (FEATURE_SET, FORMAT_VERSION, BuildSettings, SplitSpec, cache_key, cached_store,
                               entry_directory, label_and_build, load_or_build, solver_key, verify)
from uavgnn.data.store import GraphStore
from uavgnn.problem.scene_folder import files_fingerprint, load_scenes, split_files
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.report import count as counted

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
    """The split's graphs from the cache (or built), honouring ``optim.graph_cache``. Under ``task=folder`` the
    split is the folder's (its scene files, whatever their sizes: ``n_uav`` and ``count`` do not apply)."""
    if cfg.task.get("folder"):
        return load_folder_split(split, split_files(cfg.task.folder, split), build_settings(cfg),
                                 cfg.data.cache_dir, cfg.data.label_workers, cfg.optim.graph_cache)
    return load_or_build(split_spec(cfg, split, n_uav, count), SceneDistribution.of(cfg.task), build_settings(cfg),
                         cfg.data.cache_dir, workers=cfg.data.label_workers, use_cache=cfg.optim.graph_cache)


def is_cached(cfg: DictConfig, split: str, n_uav: int | None = None, count: int | None = None) -> bool:
    """Whether ``load_split`` would load the split intact from the cache (label nothing)."""
    settings = build_settings(cfg)
    if cfg.task.get("folder"):
        directory = entry_directory(cfg.data.cache_dir, split, "folder",
                                    _folder_key(split, split_files(cfg.task.folder, split), settings))
    else:
        spec = split_spec(cfg, split, n_uav, count)
        directory = entry_directory(cfg.data.cache_dir, split, f"n{spec.n_uav}",
                                    cache_key(spec, SceneDistribution.of(cfg.task), settings))
    return cfg.optim.graph_cache and verify(directory) is None


def load_folder_split(split: str, files: list[Path], settings: BuildSettings, cache_dir: str | Path,
                      workers: int = 1, use_cache: bool = True) -> GraphStore:
    """The split of your own scene ``files``, labelled and cached like a generated one; the files' names and
    contents name it (``<split>-folder-<hash>``: an edited file gets a new split)."""
    key = _folder_key(split, files, settings)

    def build() -> tuple[GraphStore, dict]:
        start = time.perf_counter()
        scenes = load_scenes(files)
        return label_and_build(scenes, time.perf_counter() - start, f"{split} ({len(files)} files)", settings,
                               workers)

    return cached_store(entry_directory(cache_dir, split, "folder", key), key, build,
                        counted(len(files), "scene file"), use_cache)


def _folder_key(split: str, files: list[Path], settings: BuildSettings) -> dict[str, Any]:
    return {"format_version": FORMAT_VERSION, "feature_set": FEATURE_SET, "split": split,
            "files": files_fingerprint(files), "count": len(files), "k_max": settings.k_max,
            "uav_neighbours": settings.uav_neighbours, "solver": solver_key(settings)}
