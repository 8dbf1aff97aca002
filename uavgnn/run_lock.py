"""One live process per run directory: an exclusive lock held for the run's lifetime.

Two processes training into one directory would interleave their histories and
overwrite each other's checkpoints. ``flock`` is released by the kernel when the
holder dies (even by ``kill -9``), so a crashed run never leaves a stale lock.
The Hydra callbacks (``uavgnn.callbacks``) take it before Hydra writes anything
into the directory, so a refused second process leaves no trace there.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path

from uavgnn.errors import RunDirectoryError
from uavgnn.storage import storage_error

LOCK_FILE = ".uavgnn.lock"
_held: dict[Path, int] = {}  # directory -> open descriptor holding its lock


def hold(directory: Path) -> None:
    """Lock ``directory`` for this process until ``release`` or exit; fails at once naming the holder."""
    directory = directory.resolve()
    if directory in _held:
        return
    path = directory / LOCK_FILE
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise storage_error(directory, err) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 400).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise RunDirectoryError(f"{directory} is in use by {holder}: wait for it to finish, or run in another "
                                "directory (hydra.run.dir=...)") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%H:%M:%S')}".encode())
    _held[directory] = fd


def release(directory: Path) -> None:
    fd = _held.pop(directory.resolve(), None)
    if fd is not None:
        os.close(fd)  # closing releases the flock
