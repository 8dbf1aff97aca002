"""Writing files safely: atomic replace, no partial files left behind, one-line errors naming path and cause.

Every checkpoint, cache file and history line goes through here, so a full
disk or a read-only directory ends the run with ``cannot write PATH: No space
left on device`` rather than a traceback, and a crash mid-write leaves the
previous file intact (temp file + ``os.replace``).
"""

from __future__ import annotations

import errno
import io
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from uavgnn.errors import StorageError

TEMP_SUFFIX = ".tmp"


def storage_error(path: Path | str, err: OSError) -> StorageError:
    """``cannot write PATH: <cause>`` with the OS's words for the cause (read-only, no space, ...)."""
    cause = os.strerror(err.errno) if err.errno else str(err)
    if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        cause += " (the directory is not writable: choose another with hydra.run.dir= or data.cache_dir=)"
    elif err.errno in (errno.ENOSPC, errno.EDQUOT):
        cause += " (free some space or write elsewhere)"
    return StorageError(f"cannot write {path}: {cause}")


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to a temp file and rename it onto ``path``: readers see the old file or the new one,
    never half of one. Any OS error removes the temp file and becomes a ``StorageError`` naming ``path``."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as err:
        raise storage_error(path, err) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def save_torch(path: Path, payload: Any) -> None:
    """``torch.save`` through ``atomic_write``: serialised in memory first, because torch reports a full
    disk as an opaque ``RuntimeError`` while a plain write says ``No space left on device``."""
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    atomic_write(path, buffer.getvalue())


def remove_stale_temps(directory: Path) -> None:
    """Delete temp files a killed writer left (``.<name>.*.tmp``)."""
    for tmp in directory.glob(f".*{TEMP_SUFFIX}"):
        try:
            tmp.unlink()
        except OSError:
            pass  # read-only: nothing we can tidy, and nothing that stops the run


def check_writable(directory: Path) -> None:
    """Fail now, naming the directory and the cause, if files cannot be created in it."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as err:
        raise storage_error(directory, err) from None
