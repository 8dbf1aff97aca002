"""One live process per run directory: an exclusive lock held for the run's lifetime.

Two processes training into one directory would interleave their histories and
overwrite each other's checkpoints. The lock is a POSIX record lock (``lockf``):
it belongs to the process that took it, so the kernel drops it when that process
dies (even by ``kill -9``), and, unlike ``flock``, a child forked by the run (label
workers, loader workers) does not inherit it and cannot keep it alive: a lock whose
holder is dead is simply taken over. The Hydra callbacks (``uavgnn.program.callbacks``) take
it before anything is written into the directory, so a refused second process leaves
no trace there; a run that is itself refused puts the previous holder's line back
(``release``), so even the lock file reads as before.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from uavgnn.infrastructure.errors import RunDirectoryError
from uavgnn.infrastructure.storage import storage_error
from uavgnn.runs import sweep_worker
from uavgnn.runs.layout import LOCK


@dataclass
class _Held:
    fd: int
    previous: bytes | None  # the lock file's text before this process took it (None: the file is ours)


STOPPING_WORKER_S = 90.0  # a worker of a killed sweep stops at the end of its step (a signal's grace: 30 s)
STOPPING_HOLDER = re.compile(
    r"^pid (?P<pid>\d+) on (?P<host>\S+) since .* \(a worker of the sweep of pid (?P<main>\d+)\)"
)
log = logging.getLogger(__name__)
_held: dict[Path, _Held] = {}  # directory -> the descriptor holding its lock


def hold_lock(directory: Path) -> None:
    """Lock ``directory`` for this process until ``release`` or exit; fails at once naming the holder."""
    directory = directory.resolve()
    if directory in _held:
        return
    path = directory / LOCK
    for _ in range(3):  # a holder that was just removing its directory may have unlinked the file we opened
        try:
            directory.mkdir(parents=True, exist_ok=True)
            existed = path.exists()
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise storage_error(directory, err) from None
        try:
            _lock(fd)
        except OSError:
            holder = os.read(fd, 400).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise RunDirectoryError(
                f"{directory} is in use by {holder}: wait for it to finish, or run in another "
                "directory (hydra.run.dir=...)"
            ) from None
        if _still_named(fd, path):
            break
        os.close(fd)
    else:
        raise RunDirectoryError(f"{directory} keeps being removed while it is locked: run in another directory")
    previous = os.read(fd, 4096) if existed else None
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    worker = f" (a worker of the sweep of pid {sweep_worker.main_pid()})" if sweep_worker.in_worker() else ""
    text = f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%H:%M:%S')}{worker}"
    os.write(fd, text.encode())
    _held[directory] = _Held(fd, previous)


def _lock(fd: int) -> None:
    """Take the lock at ``fd`` now, or - when its holder is a worker of a sweep whose main process is gone (it is
    stopping: the sweep was killed and is being re-issued) - as soon as that worker lets it go, within
    ``STOPPING_WORKER_S``; else ``OSError``."""
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except OSError:
        holder = os.pread(fd, 400, 0).decode(errors="replace")
        found = STOPPING_HOLDER.search(holder)
        if found is None or found["host"] != socket.gethostname() or sweep_worker.alive(int(found["main"])):
            raise
    log.warning("waiting for pid %s, a worker of a stopped sweep, to stop and let its run go", found["pid"])
    deadline = time.monotonic() + STOPPING_WORKER_S
    while True:
        time.sleep(0.1)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise


def _still_named(fd: int, path: Path) -> bool:
    """Whether ``path`` is still the file open at ``fd`` (not unlinked or replaced since it was opened)."""
    try:
        opened, named = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (opened.st_dev, opened.st_ino) == (named.st_dev, named.st_ino)


def release_lock(directory: Path, accepted: bool = True) -> None:
    """Give the lock up. A run that was never accepted (``accepted=False``) leaves the lock file as it found
    it: the previous holder's line back, or no file if there was none."""
    directory = directory.resolve()
    held = _held.pop(directory, None)
    if held is None:
        return
    try:
        if not accepted and held.previous is not None:
            os.lseek(held.fd, 0, os.SEEK_SET)
            os.ftruncate(held.fd, 0)
            os.write(held.fd, held.previous)
        elif not accepted:
            (directory / LOCK).unlink(missing_ok=True)
    except OSError:
        pass  # a read-only or vanished directory: nothing was changed there, nothing to put back
    finally:
        os.close(held.fd)  # closing releases the lock
