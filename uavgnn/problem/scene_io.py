"""Scene files: read and write a scene (and optionally an assignment) as JSON or NPZ.

Both formats hold the same fields (the README documents the schema):

| field             | shape  | type  | rule                                  |
|-------------------|--------|-------|---------------------------------------|
| `uav_position`    | (N, 2) | float | finite, abs <= 1e9, N >= 1            |
| `uav_range`       | (N,)   | float | finite, 0 < range <= 1e9              |
| `target_position` | (M, 2) | float | finite, abs <= 1e9, M >= 1            |
| `target_need`     | (M,)   | int   | 1 <= need <= 1e6                      |
| `target_value`    | (M,)   | float | finite, 0 < value <= 1e12             |
| `lam`             | ()     | float | finite, 0 <= lam <= 1e6               |
| `assignment`      | (N,)   | int   | optional; -1 (idle) or a target index |

The magnitude bounds keep every later computation (k-d trees, distances,
the MILP) finite and exact: a coordinate of 1e308 is a typo, not a scene.
Every problem is reported as a ``SceneFileError`` naming the file, the field
and the offending value, in one line: nothing a file holds raises anything else.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from uavgnn.infrastructure.errors import MemoryBudgetError, SceneFileError
from uavgnn.infrastructure.memory import check_fits
from uavgnn.infrastructure.storage import atomic_write, replacing
from uavgnn.problem.scenes import Scene

FIELDS = ("uav_position", "uav_range", "target_position", "target_need", "target_value", "lam")
# the largest magnitude each field may hold (docs/scenes.md, "Scene files")
BOUNDS = {
    "uav_position": 1e9,
    "target_position": 1e9,
    "uav_range": 1e9,
    "target_need": 1e6,
    "target_value": 1e12,
    "lam": 1e6,
    "assignment": 2**31,
}


def _array(raw: dict[str, Any], field: str, where: str, ndim: int, integer: bool = False) -> np.ndarray:
    if field not in raw:
        raise SceneFileError(f"{where}: missing field '{field}' (required: {', '.join(FIELDS)})")
    value = raw[field]
    try:
        arr = np.asarray(value)
        if arr.dtype.kind == "O":  # integers beyond int64 arrive as Python ints: compare them as floats
            arr = np.asarray(value, dtype=np.float64)
    except (ValueError, TypeError, OverflowError, RecursionError):
        raise SceneFileError(f"{where}: field '{field}' is not a rectangular numeric array: {_short(value)}") from None
    if arr.dtype.kind not in "iuf":
        raise SceneFileError(f"{where}: field '{field}' is not numeric: {_short(value)}")
    arr = arr.astype(np.float64)
    if arr.ndim != ndim or (ndim == 2 and arr.shape[1] != 2):
        expected = {0: "a number", 1: "a list of numbers", 2: "a list of [x, y] pairs"}[ndim]
        raise SceneFileError(f"{where}: field '{field}' has shape {arr.shape}, expected {expected}")
    bad = ~np.isfinite(arr)
    if bad.any():
        idx = np.argwhere(bad)[0]
        raise SceneFileError(
            f"{where}: field '{field}' has non-finite value {arr[tuple(idx)]} at index {tuple(idx.tolist())}"
        )
    huge = np.abs(arr) > BOUNDS[field]
    if huge.any():
        idx = np.argwhere(huge)[0]
        raise SceneFileError(
            f"{where}: field '{field}' value {arr[tuple(idx)]:g} at index {tuple(idx.tolist())} "
            f"is beyond the supported magnitude {BOUNDS[field]:g}"
        )
    if integer:
        frac = arr != np.round(arr)
        if frac.any():
            i = int(np.argmax(frac))
            raise SceneFileError(f"{where}: field '{field}' must hold integers, got {arr[i]} at index {i}")
        return arr.astype(np.int64)
    return arr


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check(arr: np.ndarray, ok: np.ndarray, where: str, field: str, rule: str) -> None:
    if not ok.all():
        i = int(np.argmin(ok))
        raise SceneFileError(f"{where}: field '{field}' value {arr.flat[i]} at index {i} violates '{rule}'")


def scene_from_dict(raw: dict[str, Any], where: str = "scene") -> tuple[Scene, np.ndarray | None]:
    """Validate the raw fields, field by field, and build the scene (and assignment if present)."""
    if not isinstance(raw, dict):
        raise SceneFileError(f"{where}: expected an object with fields {', '.join(FIELDS)}, got {type(raw).__name__}")
    uav_pos = _array(raw, "uav_position", where, 2)
    uav_range = _array(raw, "uav_range", where, 1)
    target_pos = _array(raw, "target_position", where, 2)
    need = _array(raw, "target_need", where, 1, integer=True)
    value = _array(raw, "target_value", where, 1)
    lam = _array(raw, "lam", where, 0)
    n, m = len(uav_pos), len(target_pos)
    if n == 0:
        raise SceneFileError(f"{where}: field 'uav_position' is empty (N = 0); a scene needs at least one UAV")
    if m == 0:
        raise SceneFileError(f"{where}: field 'target_position' is empty (M = 0); a scene needs at least one target")
    for field, arr, size, owner in (
        ("uav_range", uav_range, n, "UAV"),
        ("target_need", need, m, "target"),
        ("target_value", value, m, "target"),
    ):
        if len(arr) != size:
            raise SceneFileError(f"{where}: field '{field}' has {len(arr)} entries, expected {size} (one per {owner})")
    _check(uav_range, uav_range > 0, where, "uav_range", "range > 0")
    _check(need, need >= 1, where, "target_need", "need >= 1")
    _check(value, value > 0, where, "target_value", "value > 0")
    _check(lam.reshape(1), lam.reshape(1) >= 0, where, "lam", "lam >= 0")
    scene = Scene(uav_pos, uav_range, target_pos, need, value, float(lam))
    assignment = None
    if raw.get("assignment") is not None:
        assignment = _array(raw, "assignment", where, 1, integer=True)
        if len(assignment) != n:
            raise SceneFileError(
                f"{where}: field 'assignment' has {len(assignment)} entries, expected {n} (one per UAV)"
            )
        _check(assignment, (assignment >= -1) & (assignment < m), where, "assignment", f"-1 <= assignment < {m}")
    return scene, assignment


def scene_to_dict(scene: Scene, assignment: np.ndarray | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "uav_position": scene.uav_pos.tolist(),
        "uav_range": scene.uav_range.tolist(),
        "target_position": scene.target_pos.tolist(),
        "target_need": scene.need.tolist(),
        "target_value": scene.value.tolist(),
        "lam": scene.lam,
    }
    if assignment is not None:
        out["assignment"] = np.asarray(assignment).tolist()
    return out


def load_scene(path: str | Path) -> tuple[Scene, np.ndarray | None]:
    """Read a ``.json`` or ``.npz`` scene file; returns (scene, assignment or None)."""
    path = Path(path)
    if not path.exists():
        raise SceneFileError(f"{path}: no such scene file")
    if not path.is_file():
        raise SceneFileError(f"{path}: not a regular file (a directory?)")
    if path.suffix == ".json":
        check_readable(path)
        raw = _read_json(path)
    elif path.suffix == ".npz":
        raw = _read_npz(path)
    else:
        raise SceneFileError(f"{path}: unknown scene file type '{path.suffix}' (expected .json or .npz)")
    return scene_from_dict(raw, where=str(path))


JSON_MEMORY_PER_BYTE = 5  # a JSON scene parsed into Python lists, then arrays (measured: 3.9 bytes per file byte)
NPZ_MEMORY_PER_BYTE = 3  # per byte of an NPZ's arrays as stored uncompressed (measured: 2.1)


def check_readable(path: Path) -> None:
    """A scene file too large to parse in the memory available is refused before any of it is read: a JSON file
    by its size, an NPZ by its arrays' sizes as its archive lists them (a damaged archive: said when read)."""
    path = Path(path)
    if path.suffix == ".json":
        _check_readable_size(path, path.stat().st_size * JSON_MEMORY_PER_BYTE)
    elif path.suffix == ".npz":
        try:
            with zipfile.ZipFile(path) as archive:
                stored = sum(info.file_size for info in archive.infolist())
        except (zipfile.BadZipFile, OSError):
            return  # a damaged archive: said when it is read
        _check_readable_size(path, stored * NPZ_MEMORY_PER_BYTE)


def _check_readable_size(path: Path, need: float) -> None:
    """A file too large to parse in the memory available is refused before it is read."""
    try:
        check_fits(
            f"{path}: reading this {Path(path).suffix[1:].upper()} scene file",
            need,
            "use a smaller scene, or NPZ (3x less memory than JSON to read)",
        )
    except MemoryBudgetError as err:
        raise SceneFileError(str(err)) from None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SceneFileError(f"{path}: not valid JSON ({_first_line(err)})") from None
    except RecursionError:
        raise SceneFileError(f"{path}: JSON nested too deeply to be a scene") from None
    except OSError as err:
        raise SceneFileError(f"{path}: cannot be read ({err.strerror or err})") from None


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as err:  # noqa: BLE001 - BadZipFile, EOFError, pickled objects...: all one clear line
        raise SceneFileError(f"{path}: not a readable NPZ archive ({type(err).__name__}: {_first_line(err)})") from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise SceneFileError(
            f"{path}: holds a single .npy array, not an NPZ archive of the scene's fields (write it with numpy.savez)"
        )
    try:
        _check_readable_size(path, sum(info.file_size for info in loaded.zip.infolist()) * NPZ_MEMORY_PER_BYTE)
    except SceneFileError:
        loaded.close()
        raise
    try:
        with loaded:
            return {key: loaded[key] for key in loaded.files}
    except Exception as err:  # noqa: BLE001 - a damaged member inside an intact-looking archive
        raise SceneFileError(
            f"{path}: a member of the NPZ archive is unreadable ({type(err).__name__}: {_first_line(err)})"
        ) from None


def _first_line(err: Exception) -> str:
    lines = str(err).strip().splitlines()
    return lines[0][:160] if lines else type(err).__name__


def save_scene(path: str | Path, scene: Scene, assignment: np.ndarray | None = None) -> None:
    """Write a scene (and optional assignment) as ``.json`` or ``.npz``, chosen by suffix."""
    path = Path(path)
    if path.suffix == ".json":
        atomic_write(path, json.dumps(scene_to_dict(scene, assignment)).encode())
    elif path.suffix == ".npz":
        arrays = {
            "uav_position": scene.uav_pos,
            "uav_range": scene.uav_range,
            "target_position": scene.target_pos,
            "target_need": scene.need,
            "target_value": scene.value,
            "lam": np.float64(scene.lam),
        }
        if assignment is not None:
            arrays["assignment"] = np.asarray(assignment)
        with replacing(path) as tmp, tmp.open("wb") as f:
            np.savez(f, **arrays)
    else:
        raise SceneFileError(f"{path}: unknown scene file type '{path.suffix}' (expected .json or .npz)")
