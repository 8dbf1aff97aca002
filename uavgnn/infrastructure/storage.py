"""Writing files safely: atomic replace, no partial files left behind, one-line errors naming path and cause.

Every checkpoint, cache file and history line goes through here, so a full
disk or a read-only directory ends the run with ``cannot write PATH: No space
left on device`` rather than a traceback, and a crash mid-write leaves the
previous file intact (temp file + ``os.replace``).
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from uavgnn.infrastructure.errors import StorageError

TEMP_SUFFIX = ".tmp"
_UMASK = os.umask(0o022)  # read once (setting it is the only way), then put back
os.umask(_UMASK)


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
    with replacing(path) as tmp, tmp.open("wb") as f:
        f.write(data)


def _file_mode(path: Path) -> int:
    """The permissions ``path`` has, or a new file's (0666 less the umask): a rewrite keeps what readers had."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        return 0o666 & ~_UMASK


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
def replacing(path: Path, new: bool = False) -> Iterator[Path]:
    """A temp path beside ``path`` to write by any means (``atomic_write``, an animation, an NPZ): when the
    block succeeds it is flushed to the disk, given ``path``'s permissions and renamed onto it, so readers and
    a machine that loses power see the old file or the new one, never half of one; when it fails it is
    removed. Any OS error becomes a ``StorageError`` naming ``path``.

    ``new``: ``path`` must not exist. The file appears in one step (a hard link) only if nothing is there, not
    even a dangling symlink, else ``FileExistsError``: of two writers racing to one path exactly one succeeds and
    neither replaces the other's file. Where the filesystem has no hard links it is created exclusively
    (``O_EXCL``) and copied in: still never a replacement, but a reader may see it half written."""
    path = Path(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX + path.suffix)
        os.close(fd)
        yield Path(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK if new else _file_mode(path))
        if new:
            _link_new(Path(tmp), path)
        else:
            os.replace(tmp, path)
        _fsync_directory(path.parent)
    except OSError as err:
        if new and isinstance(err, FileExistsError):
            raise
        raise storage_error(path, err) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def _link_new(tmp: Path, path: Path) -> None:
    """``tmp`` at ``path`` too, which must not exist (``FileExistsError``)."""
    try:
        os.link(tmp, path)  # EEXIST (FileExistsError) if anything is at ``path``
    except OSError as err:
        if err.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):  # no hard links here
            raise
        _copy_exclusively(tmp, path)


def _copy_exclusively(source: Path, path: Path) -> None:
    """Copy ``source`` to a ``path`` that must not exist (a symlink there counts); a failed copy is removed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # a symlink there: EEXIST
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(source.read_bytes())
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def pyplot() -> ModuleType:
    """matplotlib's pyplot on the Agg backend (files, no display), imported with the first picture: it is
    ~0.5 s of a program's start that a refused run or a utility mode never draws with."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot

    return matplotlib.pyplot


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


# The operating system's own trees: a run or a cache anywhere in them could overwrite what the machine runs on
# (as root nothing stops it). /dev/shm, the one place under them meant for users' files, is allowed.
SYSTEM_TREES = (
    "/etc",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/boot",
    "/proc",
    "/sys",
    "/dev",
    "/usr/bin",
    "/usr/sbin",
    "/usr/lib",
    "/usr/lib32",
    "/usr/lib64",
    "/usr/libexec",
    "/usr/include",
    "/usr/share",
    "/usr/local/bin",
    "/usr/local/sbin",
    "/usr/local/lib",
    "/usr/local/include",
    "/usr/local/share",
    "/usr/local/etc",
    "/System",
    "/Library",
    "/private/etc",
)
USER_PLACES_IN_SYSTEM_TREES = ("/dev/shm",)
# Directories that hold the system's and other users' directories: refused themselves and their first level
# (/var/lib, /run/user, /usr/src), allowed deeper (/var/lib/jenkins/workspace, /usr/src/app, /var/home/alice).
SYSTEM_PARENTS = ("/usr", "/usr/local", "/var", "/run", "/private/var")


def system_path_problem(path: Path | str) -> str | None:
    """Why ``path`` (symlinks resolved) must not receive uavgnn's files, or None: the root directory, a
    directory of the operating system's own trees, or one that holds the system's and users' directories."""
    resolved = Path(path).expanduser().resolve()
    if resolved == Path(resolved.anchor):
        return f"{resolved} is the root directory"
    if any(resolved.is_relative_to(place) for place in USER_PLACES_IN_SYSTEM_TREES):
        return None
    for tree in SYSTEM_TREES:
        if resolved.is_relative_to(tree):
            return (
                f"{resolved} is the system directory {tree}"
                if resolved == Path(tree)
                else f"{resolved} is inside the system directory {tree}"
            )
    for parent in SYSTEM_PARENTS:
        if resolved == Path(parent) or resolved.parent == Path(parent):
            return (
                f"{resolved} is a system directory (directly in {parent})"
                if resolved != Path(parent)
                else f"{resolved} is a system directory"
            )
    return None


def file_sha256(path: Path) -> str:
    """A file's SHA-256 (hex), read in blocks: memory stays flat whatever its size."""
    with Path(path).open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_json(path: Path, payload: Any) -> None:
    """Write JSON atomically (``storage.atomic_write``): a result file is replaced whole or not at all."""
    atomic_write(Path(path), json.dumps(payload, indent=2, default=_jsonable).encode())


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
