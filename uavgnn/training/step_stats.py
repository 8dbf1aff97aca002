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
