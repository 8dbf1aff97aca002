"""Graceful stop: SIGINT/SIGTERM during training end the run at the end of the current step.

The handler only records the signal; the loop checks it after each step,
writes ``last.pt`` and raises ``Interrupted`` with the command that resumes.
A second signal restores the default behaviour, so pressing Ctrl-C twice
still ends a stuck run at once.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}  # the shell's 128 + signal number


class StopRequest:
    """Context manager: ``requested`` is the name of the first SIGINT/SIGTERM received inside it, else None."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        self._previous: dict[signal.Signals, object] = {}

    @property
    def requested(self) -> str | None:
        return self.signal.name if self.signal is not None else None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.signal, 1)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signal = signal.Signals(signum)
        for sig, handler in self._previous.items():  # a second signal acts at once
            signal.signal(sig, handler)

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():  # signals can only be caught there
            for sig in EXIT_CODES:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
