"""Fixed-seed train/val/test splits from the config, or the splits of your own scene files (``task=folder``).

Seeds are ``data.<split>_seed + n_uav``: the three bases are a million apart,
so the splits never share a generator seed, and every scale of a split (the
transfer test sets included) has its own seed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uavgnn.data.cache import (
    FEATURE_SET,
    FORMAT_VERSION,
    BuildSettings,
    SplitSpec,
    cache_key,
    cached_store,
    entry_directory,
    label_and_build,
    load_or_build,
    solver_key,
    verify,
)
from uavgnn.data.store import GraphStore
from uavgnn.infrastructure.console import count as counted
from uavgnn.problem.scene_folder import files_fingerprint, load_scenes, split_files
from uavgnn.problem.scenes import SceneDistribution

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class SplitSettings:
    """What makes a run's labelled splits: the ``data`` group's split keys and the ``task``'s scenes (generated
    from ``dist``, or the files of ``folder``)."""

    dist: SceneDistribution
    build: BuildSettings
    n_uav: int = 16  # UAVs per scene of a generated split
    scenes: dict[str, int] | None = None  # scenes per split (``data.<split>_scenes``)
    seeds: dict[str, int] | None = None  # base seed per split (``data.<split>_seed``)
    cache_dir: str = ".cache/uavgnn"
    label_workers: int = 1
    use_cache: bool = True  # ``optim.graph_cache``
    folder: str | None = None  # ``task=folder``: your scene files


def split_spec(settings: SplitSettings, split: str, n_uav: int | None = None, count: int | None = None) -> SplitSpec:
    if split not in SPLITS:
        raise ValueError(f"split: unknown split {split!r} (expected one of {', '.join(SPLITS)})")
    n_uav = settings.n_uav if n_uav is None else n_uav
    count = settings.scenes[split] if count is None else count
    return SplitSpec(split, n_uav, count, settings.seeds[split] + n_uav)


def load_split(settings: SplitSettings, split: str, n_uav: int | None = None, count: int | None = None) -> GraphStore:
    """The split's graphs from the cache (or built), honouring ``optim.graph_cache``. Under ``task=folder`` the
    split is the folder's (its scene files, whatever their sizes: ``n_uav`` and ``count`` do not apply)."""
    s = settings
    if s.folder:
        return load_folder_split(
            split, split_files(s.folder, split), s.build, s.cache_dir, s.label_workers, s.use_cache
        )
    return load_or_build(
        split_spec(s, split, n_uav, count), s.dist, s.build, s.cache_dir, workers=s.label_workers, use_cache=s.use_cache
    )


def is_cached(settings: SplitSettings, split: str, n_uav: int | None = None, count: int | None = None) -> bool:
    """Whether ``load_split`` would load the split intact from the cache (label nothing)."""
    s = settings
    if s.folder:
        directory = entry_directory(
            s.cache_dir, split, "folder", _folder_key(split, split_files(s.folder, split), s.build)
        )
    else:
        spec = split_spec(s, split, n_uav, count)
        directory = entry_directory(s.cache_dir, split, f"n{spec.n_uav}", cache_key(spec, s.dist, s.build))
    return s.use_cache and verify(directory) is None


def load_folder_split(
    split: str,
    files: list[Path],
    settings: BuildSettings,
    cache_dir: str | Path,
    workers: int = 1,
    use_cache: bool = True,
) -> GraphStore:
    """The split of your own scene ``files``, labelled and cached like a generated one; the files' names and
    contents name it (``<split>-folder-<hash>``: an edited file gets a new split)."""
    key = _folder_key(split, files, settings)

    def build() -> tuple[GraphStore, dict]:
        start = time.perf_counter()
        scenes = load_scenes(files)
        return label_and_build(scenes, time.perf_counter() - start, f"{split} ({len(files)} files)", settings, workers)

    return cached_store(
        entry_directory(cache_dir, split, "folder", key), key, build, counted(len(files), "scene file"), use_cache
    )


def _folder_key(split: str, files: list[Path], settings: BuildSettings) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "feature_set": FEATURE_SET,
        "split": split,
        "files": files_fingerprint(files),
        "count": len(files),
        "k_max": settings.k_max,
        "uav_neighbours": settings.uav_neighbours,
        "solver": solver_key(settings),
    }
