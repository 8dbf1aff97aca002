"""On-disk graph cache (DESIGN §2 "Cache"); the trajectory datasets of ``algorithm=dynamics`` use it too.

A split's graphs, scenes and MILP labels live in
``<cache_dir>/<split>-n<N>-<hash>/graphs.pt`` (``<split>-folder-<hash>`` for
``task=folder``) with a ``manifest.json``. The hash covers every setting that
changes the content (``cache_key``); anything else (workers, batch size,
device) does not invalidate. Guarantees:

- atomic writes: temp file + ``os.replace``; the manifest is written last, so a
  directory without one is an unfinished build; a full disk or read-only
  directory is a one-line ``StorageError`` and leaves no partial file;
- one build per key: a ``filelock`` around check-and-build, so concurrent
  processes wait for the first builder and then load; an intact cache is
  loaded without the lock, so it needs no write access (read-only media);
- corruption detection: the manifest's SHA-256 is checked on every load; a
  mismatch, an unreadable file or a manifest of the wrong shape is rebuilt
  with a warning;
- safe loading: ``torch.load(weights_only=True)`` only, no unpickling fallback;
- ownership by proof: every entry carries a marker (``.uavgnn-cache``, its key hash)
  from the moment its directory is made, and its name ends in that hash; only such
  entries are listed, verified or cleared (``clear_cache`` never touches anything
  else, never follows a symlink, and refuses the root, system directories, a home
  directory or a checkout as the cache directory).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import scipy
import torch
import torch_geometric
from filelock import FileLock, Timeout

from uavgnn.data.labels import solve_labels, status_counts
from uavgnn.data.store import GraphStore
from uavgnn.infrastructure.console import count
from uavgnn.infrastructure.errors import StorageError
from uavgnn.infrastructure.storage import atomic_write, file_sha256, save_torch, storage_error, system_path_problem
from uavgnn.problem.generator import distribution_key, generate_scenes
from uavgnn.problem.graphs import FEATURE_SET, build_graph
from uavgnn.problem.scenes import Scene, SceneDistribution

log = logging.getLogger(__name__)
FORMAT_VERSION = 3
GRAPHS_FILE = "graphs.pt"
MANIFEST_FILE = "manifest.json"
NO_MANIFEST = "no manifest (unfinished build)"
UNFINISHED = "unfinished build, nothing written: built when next needed"
MARKER_FILE = ".uavgnn-cache"  # written into an entry's directory when it is made: the proof it is ours
# <split>-n<N>-<key hash>, or <split>-folder-<key hash> for task=folder
ENTRY_NAME = re.compile(r"^[A-Za-z0-9_.-]+-(n\d+|folder)-(?P<hash>[0-9a-f]{16})$")
MIP_REL_GAP = 1e-6


@dataclass(frozen=True)
class SplitSpec:
    """What a split contains: ``count`` scenes of ``n_uav`` UAVs from generator seed ``seed``."""

    split: str
    n_uav: int
    count: int
    seed: int


@dataclass(frozen=True)
class BuildSettings:
    """Graph and label settings that change the cached content."""

    k_max: int = 16
    uav_neighbours: int = 8
    label_time_limit: float = 10.0


def cache_key(spec: SplitSpec, dist: SceneDistribution, settings: BuildSettings) -> dict[str, Any]:
    """Every field that changes a split's content; its hash names the directory."""
    return {
        "format_version": FORMAT_VERSION,
        "feature_set": FEATURE_SET,
        "n_uav": spec.n_uav,
        "count": spec.count,
        "seed": spec.seed,
        "distribution": distribution_key(dist),
        "k_max": settings.k_max,
        "uav_neighbours": settings.uav_neighbours,
        "solver": solver_key(settings),
    }


def solver_key(settings: BuildSettings) -> dict[str, Any]:
    return {"name": "milp-highs", "time_limit": settings.label_time_limit, "mip_rel_gap": MIP_REL_GAP}


def key_hash(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def build_split(
    spec: SplitSpec, dist: SceneDistribution, settings: BuildSettings, workers: int
) -> tuple[GraphStore, dict]:
    """Generate scenes, solve their labels, build their graphs: the cold path."""
    start = time.perf_counter()
    scenes = generate_scenes(dist, spec.n_uav, spec.count, spec.seed)
    return label_and_build(scenes, time.perf_counter() - start, f"{spec.split} N={spec.n_uav}", settings, workers)


def label_and_build(
    scenes: list[Scene], scenes_s: float, what: str, settings: BuildSettings, workers: int
) -> tuple[GraphStore, dict]:
    """The scenes' MILP labels and graphs, with the time each part took."""
    timings = {"scenes_s": scenes_s}
    start = time.perf_counter()
    labels = solve_labels(scenes, settings.label_time_limit, workers, desc=f"MILP labels {what}")
    timings["labels_s"] = time.perf_counter() - start
    start = time.perf_counter()
    graphs = [build_graph(s, settings.k_max, settings.uav_neighbours, r.assignment) for s, r in zip(scenes, labels)]
    store = GraphStore.from_graphs(graphs, scenes, labels)
    timings["graphs_s"] = time.perf_counter() - start
    return store, {"timings": timings, "label_status": status_counts(labels)}


def _save(directory: Path, payload: dict[str, Any], key: dict, info: dict, count: int, n_uav: int) -> None:
    save_torch(directory / GRAPHS_FILE, payload)
    manifest = {
        "key": key,
        "key_hash": key_hash(key),
        "count": count,
        "n_uav": n_uav,
        "files": {
            GRAPHS_FILE: {
                "bytes": (directory / GRAPHS_FILE).stat().st_size,
                "sha256": file_sha256(directory / GRAPHS_FILE),
            }
        },
        "build": info,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "versions": versions(),
    }
    atomic_write(directory / MANIFEST_FILE, json.dumps(manifest, indent=2).encode())


def versions() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_geometric": torch_geometric.__version__,
        "numpy": np.__version__,
        "scipy": scipy.__version__,
    }


def verify(directory: Path) -> str | None:
    """None if the cache directory is complete and intact, else what is wrong."""
    manifest_path = directory / MANIFEST_FILE
    if not manifest_path.exists():
        return NO_MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as err:
        return f"unreadable manifest ({type(err).__name__}: {err})"
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return f"manifest of the wrong shape (expected an object with 'files', got {_short(manifest)})"
    expected = manifest["files"].get(GRAPHS_FILE)
    if not (
        isinstance(expected, dict)
        and isinstance(expected.get("bytes"), int)
        and isinstance(expected.get("sha256"), str)
    ):
        return f"manifest lacks the size and checksum of {GRAPHS_FILE} (got {_short(expected)})"
    path = directory / GRAPHS_FILE
    if not path.exists():
        return f"{GRAPHS_FILE} missing"
    if path.stat().st_size != expected["bytes"]:
        return f"{GRAPHS_FILE} has {path.stat().st_size} bytes, manifest says {expected['bytes']} (truncated?)"
    if file_sha256(path) != expected["sha256"]:
        return f"{GRAPHS_FILE} checksum mismatch (corrupt)"
    return None


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def load_or_build(
    spec: SplitSpec,
    dist: SceneDistribution,
    settings: BuildSettings,
    cache_dir: str | Path,
    workers: int = 1,
    use_cache: bool = True,
) -> GraphStore:
    """The split from the cache if present and intact, else built (and cached when ``use_cache``)."""
    key = cache_key(spec, dist, settings)
    return cached_store(
        entry_directory(cache_dir, spec.split, f"n{spec.n_uav}", key),
        key,
        lambda: build_split(spec, dist, settings, workers),
        f"{count(spec.count, 'scene')} of {count(spec.n_uav, 'UAV')}",
        use_cache,
    )


def entry_directory(cache_dir: str | Path, split: str, kind: str, key: dict[str, Any]) -> Path:
    """Where the entry of ``key`` lives: ``<cache_dir>/<split>-<kind>-<key hash>`` (kind: ``n<N>``, ``folder``)."""
    return Path(cache_dir) / f"{split}-{kind}-{key_hash(key)}"


def cached_store(
    directory: Path, key: dict[str, Any], build: Callable[[], tuple[GraphStore, dict]], what: str, use_cache: bool
) -> GraphStore:
    """``build()``'s store, cached in ``directory`` under ``key`` (built once, then loaded) when ``use_cache``."""
    if not use_cache:
        return build()[0]

    def build_payload() -> tuple[dict[str, Any], dict, int, int]:
        store, info = build()
        payload = {
            "tensors": store.tensors,
            "objective": store.objective,
            "status": store.status,
            "solve_time": store.solve_time,
        }
        return payload, info, len(store), int(store.tensors["n_uav"].max()) if len(store) else 0

    payload = load_or_build_payload(directory, key, build_payload, what)
    return GraphStore(payload["tensors"], payload["objective"], payload["status"], payload["solve_time"])


Build = Callable[[], tuple[dict[str, Any], dict, int, int]]  # () -> (payload, build info, count, n_uav)


def load_or_build_payload(directory: Path, key: dict[str, Any], build: Build, what: str) -> dict[str, Any]:
    """A cached payload (tensors) of ``directory`` if complete and intact, else ``build()``'s, written there
    under the lock. Shared by the graph splits and the trajectory datasets (``uavgnn.dynamics.rollouts``)."""
    payload = _load_intact(directory)  # the common case, lock-free: needs no write access
    if payload is not None:
        return payload
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(directory) + ".lock")
        lock.acquire()
    except OSError as err:
        raise storage_error(directory, err) from None
    try:
        if not (directory / MARKER_FILE).exists():
            atomic_write(directory / MARKER_FILE, key_hash(key).encode())
        payload = _load_intact(directory)  # another process may have built it while we waited
        if payload is not None:
            return payload
        problem = verify(directory)
        if problem != NO_MANIFEST:
            warnings.warn(f"cache {directory}: {problem}; rebuilding", RuntimeWarning, stacklevel=3)
        log.info("cache miss: building %s (%s)", directory, what)
        try:
            payload, info, count, n_uav = build()
            _save(directory, payload, key, info, count, n_uav)
        except BaseException:  # refused, failed, interrupted: no half-built entry left behind
            if not (directory / MANIFEST_FILE).exists():
                shutil.rmtree(directory, ignore_errors=True)
            raise
        return payload
    finally:
        lock.release()


def _load_intact(directory: Path) -> dict[str, Any] | None:
    """The cached payload if its directory is complete and intact, else None (a damaged one is then rebuilt)."""
    if verify(directory) is not None:
        return None
    try:
        payload = torch.load(directory / GRAPHS_FILE, weights_only=True)
    except Exception:  # noqa: BLE001 - a file that passes the checksum but does not load is still corrupt
        return None
    log.info("cache hit: %s", directory)
    return payload


def is_cache_entry(directory: Path) -> bool:
    """Whether ``directory`` is provably a cache entry of uavgnn: a real directory (not a symlink) named
    ``<split>-n<N>-<hash>`` that holds the marker with that hash, or (entries built before the marker) a
    manifest recording it."""
    found = ENTRY_NAME.match(directory.name)
    if found is None or directory.is_symlink() or not directory.is_dir():
        return False
    for proof, read in (
        (directory / MARKER_FILE, lambda text: text.strip()),
        (directory / MANIFEST_FILE, lambda text: json.loads(text).get("key_hash")),
    ):
        try:
            if proof.is_file() and not proof.is_symlink() and read(proof.read_text()) == found["hash"]:
                return True
        except (OSError, ValueError, AttributeError):
            continue
    return False


def tree_bytes(directory: Path) -> int:
    """Bytes of every file below ``directory``, symlinks counted as links (never followed)."""
    total = 0
    for root, _, files in os.walk(directory, followlinks=False):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def foreign_entries(cache_dir: str | Path) -> list[str]:
    """Names in ``cache_dir`` that are neither uavgnn cache entries nor their lock files: never touched."""
    root = Path(cache_dir)
    if not root.is_dir():
        return []
    ours = {p.name for p in root.iterdir() if is_cache_entry(p)}
    locks = {f"{name}.lock" for name in ours | _orphan_locks(root)}
    return sorted(p.name for p in root.iterdir() if p.name not in ours | locks)


def _orphan_locks(root: Path) -> set[str]:
    """Entry names of the lock files (``<entry>.lock``, regular files) whose entry no longer exists."""
    return {
        p.name[:-5]
        for p in root.glob("*.lock")
        if ENTRY_NAME.match(p.name[:-5]) and p.is_file() and not p.is_symlink() and not (root / p.name[:-5]).exists()
    }


def cache_entries(cache_dir: str | Path) -> list[dict[str, Any]]:
    """One row per uavgnn cache entry: name, count, size (all its files), problem (None if intact,
    ``UNFINISHED`` for a build stopped before it wrote anything)."""
    root = Path(cache_dir)
    rows = []
    for directory in sorted(p for p in root.glob("*") if is_cache_entry(p)):
        problem = verify(directory)
        if problem == NO_MANIFEST and not (directory / GRAPHS_FILE).exists():
            problem = UNFINISHED  # a build stopped before it wrote anything (kill -9): not damaged
        manifest = json.loads((directory / MANIFEST_FILE).read_text()) if problem is None else {}
        timings = manifest.get("build", {}).get("timings", {})
        rows.append(
            {
                "name": directory.name,
                "graphs": manifest.get("count"),
                "n_uav": manifest.get("n_uav"),
                "mb": round(tree_bytes(directory) / 2**20, 2),
                "created": manifest.get("created"),
                "build_s": round(sum(timings.values()), 1) if timings else None,
                "problem": problem,
            }
        )
    return rows


def clear_refusal(cache_dir: str | Path) -> str | None:
    """Why ``cache_dir`` must not be cleared even of proven entries, or None: the root, a system directory,
    a home directory or a checkout (a typo there would cost a user their files if proof ever failed)."""
    root = Path(cache_dir).expanduser().resolve()
    problem = system_path_problem(root)
    if problem:
        return problem
    if root == Path.home().resolve() or root.parent == Path("/home"):
        return f"{root} is a home directory"
    if (root / ".git").exists():
        return f"{root} is a checkout (it holds .git)"
    return None


def clear_cache(cache_dir: str | Path) -> int:
    """Delete every uavgnn cache entry under ``cache_dir`` (and its lock file), nothing else; returns how many."""
    root = Path(cache_dir)
    refusal = clear_refusal(root)
    if refusal:
        raise StorageError(f"data.cache_dir={cache_dir}: {refusal}: not clearing it")
    removed = 0
    for entry in [p for p in root.glob("*") if is_cache_entry(p)]:
        lock = FileLock(str(entry) + ".lock")
        try:
            try:
                lock.acquire(timeout=1)
            except Timeout:
                log.warning("cache %s is being built by another process: waiting for it to finish", entry.name)
                lock.acquire()
            try:
                shutil.rmtree(entry)
            finally:
                lock.release()
        except OSError as err:
            raise StorageError(f"{storage_error(entry, err)} (removed {count(removed, 'cache')} before it)") from None
        removed += 1
    for name in _orphan_locks(root):
        (root / f"{name}.lock").unlink(missing_ok=True)
    return removed
