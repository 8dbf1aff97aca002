"""A folder of your own scene files as train/val/test splits (``task=folder``).

Either the folder has ``train/``, ``val/`` and ``test/`` subfolders of scene files (your split), or it is one
flat folder of them, split once and for all by a fixed permutation of the sorted file names: a tenth (at
least one file) to ``val``, a tenth to ``test``, the rest to ``train``. Scene files are the ``.json`` and
``.npz`` files of ``uavgnn.problem.scene_io`` (docs/scenes.md, "Scene files"); scenes may differ in size.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from uavgnn.infrastructure.errors import ConfigError, SceneFileError
from uavgnn.infrastructure.memory import gigabytes
from uavgnn.infrastructure.storage import file_sha256
from uavgnn.problem.scene_io import check_readable, load_scene
from uavgnn.problem.scenes import Scene

SCENE_SUFFIXES = (".json", ".npz")
SPLIT_NAMES = ("train", "val", "test")
FLAT_SPLIT_SEED = 0  # the permutation that splits a flat folder: fixed, so a folder always splits the same way
# Larger than any scene file the loader reads: load_scene needs 5 (JSON) or 3 (NPZ) bytes of free memory per
# byte, so this takes 200+ GB free, and the MILP that labels every scene of a folder gives up long before
# (a 64 GB scene holds billions of UAVs and targets). Bigger is not a scene: refused before it is hashed.
MAX_SCENE_FILE_BYTES = 64 * 2**30


def _scene_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_file() and p.suffix in SCENE_SUFFIXES)


def split_files(folder: str | Path, split: str) -> list[Path]:
    """The scene files of ``split`` (train, val or test) in ``folder``; a missing or too small folder is one
    line naming it."""
    root = Path(folder).expanduser()
    where = f"task.folder={folder}"
    if not root.is_dir():
        raise ConfigError(
            f"{where}: no such folder (give a folder of .json/.npz scene files, or one with "
            "train/, val/ and test/ subfolders of them)"
        )
    subfolders = [name for name in SPLIT_NAMES if (root / name).is_dir()]
    if subfolders:
        missing = [name for name in SPLIT_NAMES if name not in subfolders or not _scene_files(root / name)]
        if missing:
            raise ConfigError(
                f"{where}: has {', '.join(n + '/' for n in subfolders)} but no scene files in "
                f"{', '.join(n + '/' for n in missing)}: give all three of train/, val/ and test/, "
                "or one flat folder of scene files"
            )
        return _scene_files(root / split)
    files = _scene_files(root)
    if len(files) < 3:
        raise ConfigError(
            f"{where}: {len(files)} scene files (.json/.npz); a flat folder needs at least 3 "
            "(train, val and test get one each at least)"
        )
    held_out = max(1, len(files) // 10)
    order = np.random.default_rng(FLAT_SPLIT_SEED).permutation(len(files))
    parts = {"val": order[:held_out], "test": order[held_out : 2 * held_out], "train": order[2 * held_out :]}
    return [files[i] for i in sorted(parts[split])]


def files_fingerprint(files: list[Path]) -> str:
    """SHA-256 of the files' names and contents: a changed, added or removed file names a new split. Every file's
    size is checked against ``MAX_SCENE_FILE_BYTES`` and the memory reading it takes before any is hashed (a file
    too large is refused at once, not after minutes of hashing); each is hashed as a stream (memory stays flat)."""
    for path in files:
        _check_size(path)
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0")
        try:
            digest.update(bytes.fromhex(file_sha256(path)))
        except OSError as err:
            raise SceneFileError(f"{path}: cannot be read ({err.strerror or err})") from None
    return digest.hexdigest()


def _check_size(path: Path) -> None:
    """A file over the cap or unreadable is one line naming it."""
    try:
        size = path.stat().st_size
    except OSError as err:
        raise SceneFileError(f"{path}: cannot be read ({err.strerror or err})") from None
    if size > MAX_SCENE_FILE_BYTES:
        raise SceneFileError(
            f"{path}: {gigabytes(size)} ({size:,} bytes), over the "
            f"{gigabytes(MAX_SCENE_FILE_BYTES)} a scene file can be (MAX_SCENE_FILE_BYTES): "
            "not a scene; take it out of the folder"
        )
    check_readable(path)


def load_scenes(files: list[Path]) -> list[Scene]:
    """The scenes of ``files`` (an assignment stored in a file is not used: the MILP labels every scene)."""
    return [load_scene(path)[0] for path in files]
