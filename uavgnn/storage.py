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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
    """Write ``data`` to a temp file, flush it to the disk and rename it onto ``path``: readers, and a machine
    that loses power, see the old file or the new one, never half of one. Any OS error removes the temp file
    and becomes a ``StorageError`` naming ``path``."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_directory(path.parent)
    except OSError as err:
        raise storage_error(path, err) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (where the platform allows opening a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory: the rename itself is still atomic
    finally:
        os.close(fd)


def save_torch(path: Path, payload: Any) -> None:
    """``torch.save`` through ``atomic_write``: serialised in memory first, because torch reports a full
    disk as an opaque ``RuntimeError`` while a plain write says ``No space left on device``."""
    import torch  # here, not at the top: the entry point imports this module and must start fast

    buffer = io.BytesIO()
    torch.save(payload, buffer)
    atomic_write(path, buffer.getvalue())


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temp path beside ``path`` for writers that need a file name (an animation, an NPZ): renamed onto
    ``path`` when the block succeeds, removed when it fails, so ``path`` is never half written."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX + path.suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except OSError as err:
        raise storage_error(path, err) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save_figure(fig: Any, path: Path, **savefig: Any) -> Path:
    """``fig.savefig`` through ``atomic_write`` (format from the suffix): a picture is replaced whole."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=Path(path).suffix.lstrip(".") or "png", **savefig)
    atomic_write(Path(path), buffer.getvalue())
    return Path(path)


def remove_stale_temps(directory: Path) -> None:
    """Delete temp files a killed writer left (``.<name>.*.tmp``)."""
    for tmp in directory.glob(f".*{TEMP_SUFFIX}*"):
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


# Directories of the operating system: a run or a cache there could overwrite what the machine runs on
# (as root nothing stops it). Below them, a few places are meant for users' files: temp and shared-memory
# directories, removable drives, macOS's per-user temp folders.
SYSTEM_DIRECTORIES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run",
                      "/sbin", "/sys", "/usr", "/var", "/System", "/Library", "/private/etc", "/private/var")
USER_PLACES_UNDER_SYSTEM = ("/var/tmp", "/dev/shm", "/run/media", "/var/folders", "/private/var/folders",
                            "/private/var/tmp")


def system_path_problem(path: Path | str) -> str | None:
    """Why ``path`` (symlinks resolved) must not receive uavgnn's files, or None: the root directory or a
    directory of the operating system."""
    resolved = Path(path).expanduser().resolve()
    if resolved == Path(resolved.anchor):
        return f"{resolved} is the root directory"
    for place in USER_PLACES_UNDER_SYSTEM:
        if resolved.is_relative_to(place):
            return None
    for system in SYSTEM_DIRECTORIES:
        if resolved.is_relative_to(system):
            return (f"{resolved} is the system directory {system}" if resolved == Path(system)
                    else f"{resolved} is inside the system directory {system}")
    return None
