"""Graceful stop: SIGINT/SIGTERM during training end the run at the end of the current step.

The handler only records the signal; the loop checks it after each step,
writes ``last.pt`` and raises ``Interrupted`` with the command that resumes.
A second signal ends the run at once, wherever it is (``uavgnn.signals``), so
pressing Ctrl-C twice still leaves a stuck run.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

from uavgnn import signals
from uavgnn.signals import EXIT_CODES


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
        self.signal = self.signal or signal.Signals(signum)

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():  # signals can only be caught there
            for sig in EXIT_CODES:
                self._previous[sig] = signal.signal(sig, self._handle)
        self._graceful = signals.graceful()
        self._graceful.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._graceful.__exit__(*exc)
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
