"""A training step's loss and statistics, kept on the device until the host needs them.

Reading a loss with ``.item()`` after every step makes the host wait for the device's whole queue: on a GPU
it drains the pipeline once a step. The loop instead adds each step's values into a few device tensors and
reads them once, at its next log line, evaluation or checkpoint. The sums are float64 and run over the whole
log window, from the values a resumed run saved: the same additions in the same order as one uninterrupted
run, so a resumed history equals it exactly.
"""

from __future__ import annotations

import torch

HOST_KEYS = ("steps", "skipped", "wait", "busy", "items")  # counted by the loop on the host


class StepStats:
    """The log window's device sums: the loss and the algorithm's stats over the steps whose update was
    applied, their count ``n``, and the run of consecutive skipped steps (and its longest since the last
    read): a few device ops a step, one host read per log line."""

    def __init__(self, device: torch.device, window: dict[str, float] | None = None) -> None:
        self.device, self.start = device, dict(window or {})  # the window so far (after a resume)
        self.names: tuple[str, ...] = ()
        self.sums = self.run = self.worst = self.one = self.zero = None

    def add(self, loss: torch.Tensor, stats: dict[str, torch.Tensor], applied: torch.Tensor) -> None:
        if self.sums is None:
            self.names = tuple(stats)
            self.sums = torch.tensor(
                [self.start.get(key, 0.0) for key in ("n", "loss", *self.names)],
                dtype=torch.float64,
                device=self.device,
            )
            self.run = torch.zeros((), dtype=torch.float64, device=self.device) if self.run is None else self.run
            self.worst = self.run.clone()
            self.one = torch.ones((), dtype=torch.float64, device=self.device)  # each step's count
            self.zero = torch.zeros((), dtype=torch.float64, device=self.device)
        elif tuple(stats) != self.names:
            raise RuntimeError(f"the algorithm's stats changed between steps: {self.names} -> {tuple(stats)}")
        with torch.no_grad():  # one stack, not a detach and a copy per value; the float64 count first makes
            values = torch.stack([self.one, loss, *stats.values()])  # every value float64 (an integer: exact)
        self.sums += torch.where(applied, values, self.zero)
        self.run = (self.run + 1) * (~applied)
        self.worst = torch.maximum(self.worst, self.run)

    def read(self) -> tuple[dict[str, float], int, int]:
        """(the window's sums by name, the current run of skipped steps, the longest run since the last read)."""
        if self.sums is None:
            return {key: value for key, value in self.start.items() if key not in HOST_KEYS}, 0, 0
        *sums, run, worst = torch.cat([self.sums, self.run[None], self.worst[None]]).tolist()
        self.worst = self.run.clone()
        return dict(zip(("n", "loss", *self.names), sums)), int(run), int(worst)

    def reset(self) -> None:
        """A new log window (the run of skipped steps goes on)."""
        self.start = {}
        if self.sums is not None:
            self.sums = torch.zeros_like(self.sums)


WINDOW = ("loss", "n", *HOST_KEYS)  # the sums of every log window (plus the algorithm's stats)


class LogWindow:
    """The log window: the steps since the last log line, their device sums (``StepStats``) and the host's counts
    (steps, skipped, the time waited for data and spent, the items trained on). Saved in ``last.pt``, so a resumed
    run's first log line is the uninterrupted run's."""

    def __init__(self, device: torch.device, saved: dict[str, float] | None = None) -> None:
        self.device = device
        self.sums = dict.fromkeys(WINDOW, 0.0)
        if saved is not None:  # a checkpoint's window: its steps so far
            self.sums.update(saved)
            self.sums["steps"] = self.sums["steps"] or self.sums["n"]  # saved before skipped steps counted
        self.unread = StepStats(device, self.sums if saved is not None else None)

    def add(self, loss: torch.Tensor, stats: dict[str, torch.Tensor], applied: torch.Tensor) -> None:
        """One step's loss and stats, on the device."""
        self.unread.add(loss, stats, applied)

    def count(self, **host: float) -> None:
        """One step's counts on the host: ``steps``, the seconds it waited for data (``wait``) and took (``busy``),
        the ``items`` it trained on."""
        for name, value in host.items():
            self.sums[name] += value

    def read(self) -> tuple[int, int, int]:
        """The device sums into the window; returns (steps skipped since the last read, the current run of skipped
        steps, the longest since the last read)."""
        sums, run, worst = self.unread.read()
        self.sums.update(sums)
        skipped = self.sums["steps"] - self.sums["n"] - self.sums["skipped"]
        self.sums["skipped"] += skipped
        return int(skipped), run, worst

    def mean(self, name: str) -> float:
        """The mean of ``name`` over the window's applied steps (NaN when every step was skipped)."""
        n = self.sums["n"]
        return self.sums[name] / n if n else float("nan")

    def reset(self) -> None:
        """A new log window after a log line (the run of skipped steps goes on)."""
        self.sums = dict.fromkeys(self.sums, 0.0)
        self.unread.reset()

    def restart(self) -> None:
        """A new window with nothing unread: a phase's start."""
        self.sums = dict.fromkeys(self.sums, 0.0)
        self.unread = StepStats(self.device)
