"""SIGTERM and SIGINT in every phase of a run: one line saying so, never a silent exit, never a hang.

- In the training loop the signal is recorded and the loop stops at the end of its step with ``last.pt``
  written (``uavgnn.training.stop.StopRequest``, inside ``graceful()``).
- Anywhere else SIGTERM raises ``Interrupted`` (and SIGINT ``KeyboardInterrupt``) in the main thread, so the
  run ends with one line. Python drops an exception raised where it cannot propagate (the at-fork callbacks
  ``logging`` registers, when a worker is forked): that one is sent again a moment later, from another thread.
- Python runs its handlers between bytecodes of the main thread, so a signal that arrives inside a long C call
  (a MILP solve, a kernel) waits for it. A watcher thread is woken at once (``signal.set_wakeup_fd``): outside
  the training loop it gives the run ``GRACE_S`` seconds to stop, then ends it with the line; a second signal
  ends it at once, wherever it is (press Ctrl-C twice to leave a stuck run).
- Processes the run forks get SIGTERM's default action back and no wakeup pipe (loader workers then set
  torch's own handler). A scheduler signals the whole process group, so loader workers may die under the
  step under way: the training loop then stops at the last completed step (``Trainer.fit``).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from uavgnn.infrastructure.errors import Interrupted

GRACE_S = 30.0  # outside the training loop: seconds a signalled run may take to stop before it is ended
REDELIVER_S = 0.05  # a SIGTERM whose exception Python dropped is sent again this much later
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}  # the shell's 128 + signal number

_graceful = [0]  # > 0 while the training loop stops on signals itself
_signals: list[int] = []  # signals received since ``install``
_resent = [0]  # SIGTERMs sent again by ``_redeliver``: not the user's second signal
_previous_hook: list[Any] = [sys.__unraisablehook__]
_forks_reset = [False]


def install(mode: str) -> Callable[[], None]:
    """Handle SIGTERM/SIGINT as described above for a run of ``mode``; returns what undoes it. A no-op off the
    main thread (only the main thread may set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(f"interrupted by SIGTERM (mode={mode})", EXIT_CODES[signal.SIGTERM])

    previous_term = signal.signal(signal.SIGTERM, stop)
    _previous_hook[0] = sys.unraisablehook
    sys.unraisablehook = _redeliver
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    _signals.clear()
    threading.Thread(target=_watch, args=(read,), name="uavgnn-signals", daemon=True).start()
    if not _forks_reset[0]:
        os.register_at_fork(after_in_child=_default_in_child)
        _forks_reset[0] = True

    def undo() -> None:
        signal.set_wakeup_fd(previous_fd)
        os.close(write)  # the watcher reads end-of-file and ends
        signal.signal(signal.SIGTERM, previous_term if previous_term is not None else signal.SIG_DFL)
        sys.unraisablehook = _previous_hook[0]

    return undo


@contextmanager
def graceful() -> Iterator[None]:
    """The block stops on signals by itself (the training loop): the watcher waits for a second signal."""
    _graceful[0] += 1
    try:
        yield
    finally:
        _graceful[0] -= 1


def _watch(read: int) -> None:
    with os.fdopen(read, "rb", buffering=0) as pipe:
        while chunk := pipe.read(64):
            for signum in chunk:
                if signum not in EXIT_CODES:
                    continue
                if signum == signal.SIGTERM and _resent[0]:
                    _resent[0] -= 1
                    continue
                _signals.append(signum)
                if len(_signals) >= 2:
                    _exit(signum, "a second signal")
                elif not _graceful[0]:
                    timer = threading.Timer(GRACE_S, _exit, (signum, f"still busy {GRACE_S:g} s later"))
                    timer.daemon = True
                    timer.start()


def _exit(signum: int, why: str) -> None:
    """End the process now, saying so: its files are written atomically, so nothing is left half written."""
    name = signal.Signals(signum).name
    sys.stderr.write(f"interrupted by {name} ({why}): exiting now; nothing already written is lost\n")
    sys.stderr.flush()
    os._exit(EXIT_CODES[signum])


def _redeliver(unraisable: Any) -> None:
    if isinstance(unraisable.exc_value, Interrupted):
        _resent[0] += 1
        threading.Timer(REDELIVER_S, os.kill, (os.getpid(), signal.SIGTERM)).start()
    else:
        _previous_hook[0](unraisable)


def _default_in_child() -> None:
    """In a forked worker: SIGTERM's default action, no wakeup pipe (the parent's watcher is not here)."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:  # forked from a thread other than the main one: the handlers are not ours to set
        pass
