"""A run's metric history, ``metrics.jsonl``: one JSON object a line, each with its ``step``.

It is the run's record (the dashboards are views of it): a line that cannot be written ends the run with a
``StorageError`` naming the file. A rewrite (a resume, a rollback) replaces the file atomically, so a kill at any
moment leaves the old history or the new one, never a cut; a torn last line (a kill while appending it) is
dropped when the history is read.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from uavgnn.infrastructure.errors import RunDirectoryError
from uavgnn.infrastructure.storage import atomic_write, storage_error
from uavgnn.runs.layout import HISTORY

log = logging.getLogger(__name__)


def read_history(out_dir: Path) -> list[dict[str, Any]]:
    """The rows of ``metrics.jsonl``; a torn last line (the process was killed mid-write) is dropped."""
    return list(stream_history(out_dir))


def stream_history(out_dir: Path) -> Iterator[dict[str, Any]]:
    """The rows of ``metrics.jsonl`` one at a time, read line by line (memory stays flat whatever its size); a
    torn last line is dropped, any other unreadable line is a ``RunDirectoryError``."""
    path = out_dir / HISTORY
    if not path.exists():
        return
    with path.open(errors="replace") as f:
        pending: tuple[int, str] | None = None  # a line that did not parse: fine only if it is the last
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            if pending is not None:
                raise RunDirectoryError(
                    f"{path} is damaged: line {pending[0]} is not a JSON object (only a torn last line, "
                    "from a kill while writing it, is tolerated)"
                )
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                pending = (number, line)
                continue
            if not isinstance(row, dict):
                raise RunDirectoryError(
                    f"{path} is damaged: line {number} is not a JSON object (only a torn last line, "
                    "from a kill while writing it, is tolerated)"
                )
            yield row
    if pending is not None:
        log.warning("%s: dropping a torn last line (the run was killed while writing it)", path)


def thinned_history(out_dir: Path, max_rows: int) -> tuple[list[dict[str, Any]], int]:
    """The history read as a stream, its training rows thinned to at most ``max_rows``: every one while they fit,
    else every k-th (k doubling as the history grows: evenly spread, the first kept); every other row (a
    validation, a test, an event: few, and what the reports read) kept; and k."""
    kept: list[tuple[int, dict[str, Any]]] = []  # (training row number or -1, row)
    stride, training, kept_training = 1, 0, 0
    for row in stream_history(out_dir):
        if not any(key.startswith("train/") for key in row):
            kept.append((-1, row))
            continue
        if training % stride == 0:
            kept.append((training, row))
            kept_training += 1
        training += 1
        if kept_training > max_rows:
            stride *= 2
            kept = [(number, row) for number, row in kept if number < 0 or number % stride == 0]
            kept_training = sum(number >= 0 for number, _ in kept)
    return [row for _, row in kept], stride


class History:
    """The open ``metrics.jsonl`` of a run directory, appended to line by line; ``rows`` counts its lines (a
    checkpoint records it, a resume checks the history still has them)."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir, self.path = out_dir, out_dir / HISTORY
        self.rows = 0
        self._file: IO[str] | None = None

    @property
    def is_open(self) -> bool:
        return self._file is not None

    def truncate(self, step: int | None) -> None:
        """Keep the rows up to ``step`` (none for ``None``) and append from there: on resume and when training
        rolls back to its last good checkpoint."""
        self.close()
        kept = [] if step is None else [r for r in read_history(self.out_dir) if r.get("step", 0) <= step]
        atomic_write(self.path, "".join(json.dumps(r) + "\n" for r in kept).encode())
        self.rows = len(kept)
        try:
            self._file = self.path.open("a")
        except OSError as err:
            raise storage_error(self.path, err) from None

    def append(self, row: dict[str, Any]) -> None:
        try:
            self._file.write(json.dumps(row) + "\n")
            self._file.flush()
        except OSError as err:
            raise storage_error(self.path, err) from None
        self.rows += 1

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
