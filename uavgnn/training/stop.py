"""Graceful stop: SIGINT/SIGTERM during training end the run at the end of the current step, and so do a
scheduler's notices of preemption or of the time limit (SIGUSR1, SIGUSR2: SLURM's ``--signal``, submitit's).

The handler only records the signal; the loop checks it after each step,
writes ``last.pt`` and raises ``Interrupted`` with the command that resumes
(under a scheduler the job is then requeued: ``uavgnn.runs.requeue``).
A second signal ends the run at once, wherever it is (``uavgnn.infrastructure.signals``), so
pressing Ctrl-C twice still leaves a stuck run.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

from uavgnn.infrastructure import signals
from uavgnn.infrastructure.signals import EXIT_CODES

PREEMPTION = (signal.SIGUSR1, signal.SIGUSR2)  # a scheduler's notice that the job is about to be stopped


class StopRequest:
    """Context manager: ``requested`` is the name of the first SIGINT/SIGTERM/SIGUSR1/SIGUSR2 received inside it,
    else None."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        self._previous: dict[signal.Signals, object] = {}

    @property
    def requested(self) -> str | None:
        return self.signal.name if self.signal is not None else None

    @property
    def exit_code(self) -> int:
        return 1 if self.signal is None else EXIT_CODES.get(self.signal, 128 + int(self.signal))

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signal = self.signal or signal.Signals(signum)
        # a signal to the process group ends the loader's workers too: torch's SIGCHLD handler would raise at
        # any later line (writing last.pt); the run is stopping, so their end is no error
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():  # signals can only be caught there
            for sig in (*EXIT_CODES, *PREEMPTION):
                self._previous[sig] = signal.signal(sig, self._handle)
        self._graceful = signals.graceful()
        self._graceful.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._graceful.__exit__(*exc)
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
