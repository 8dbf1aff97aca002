"""The finished pieces of an unfinished run, kept in its directory as they finish.

A mode that works through a list of pieces (``mode=eval``'s test sets) writes each finished piece's result into
``<run dir>/partial/`` atomically, so the same command re-issued there after a stop continues where it stopped:
the finished pieces are read back, never computed again. ``identity.json`` records what the work is (the config
that defines it and a digest of its input): a different command is refused there, never continued with another's
pieces. Every piece's value is used as read back from its file, also in an uninterrupted run, so a resumed run's
results are the same to the last digit. The folder goes once the run has written its results.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from uavgnn.infrastructure.errors import RunDirectoryError
from uavgnn.infrastructure.nested import flatten
from uavgnn.infrastructure.storage import storage_error, write_json
from uavgnn.runs.layout import PARTIAL

IDENTITY = "identity.json"


class PartialResults:
    """The finished pieces in ``directory``'s ``partial/`` folder of the work ``identity`` names."""

    def __init__(self, directory: Path, identity: dict[str, Any]) -> None:
        self.folder = Path(directory) / PARTIAL
        self.identity = json.loads(json.dumps(identity, sort_keys=True, default=str))

    def exists(self) -> bool:
        """Whether the folder records a work (one killed before it wrote its record holds nothing: it goes)."""
        if self.folder.is_dir() and not any(self.folder.iterdir()):
            self.folder.rmdir()
        return (self.folder / IDENTITY).is_file()

    def changes(self) -> dict[str, tuple[Any, Any]]:
        """``{key: (recorded, now)}`` of every key of the identity that differs from the recorded one."""
        try:
            recorded = flatten(json.loads((self.folder / IDENTITY).read_text()))
        except (OSError, ValueError) as err:
            raise RunDirectoryError(f"{self.folder / IDENTITY}: unreadable ({err}); remove {self.folder}") from None
        now, absent = flatten(self.identity), "<absent>"
        keys = sorted(set(recorded) | set(now))
        return {k: (recorded.get(k, absent), now.get(k, absent)) for k in keys if recorded.get(k) != now.get(k)}

    def start(self) -> None:
        """Record what the work is (once: a resumed run keeps the record it continues)."""
        if not self.exists():
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise storage_error(self.folder, err) from None
            write_json(self.folder / IDENTITY, self.identity)

    def get(self, key: str) -> Any | None:
        """The value of the finished piece ``key``; None when it has not finished."""
        path = self._path(key)
        if not path.is_file():
            return None
        try:
            stored = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise RunDirectoryError(f"{path}: unreadable ({err}); remove it and that set is scored again") from None
        return stored["value"] if isinstance(stored, dict) and stored.get("key") == key else None

    def put(self, key: str, value: Any) -> Any:
        """Keep the finished piece ``key``; returns its value as read back (what a resumed run will read)."""
        write_json(self._path(key), {"key": key, "value": value})
        return self.get(key)

    def finished(self) -> int:
        return sum(1 for path in self.folder.glob("*.json") if path.name != IDENTITY) if self.folder.is_dir() else 0

    def clear(self) -> None:
        """The run wrote its results: its pieces say nothing more."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def _path(self, key: str) -> Path:
        return self.folder / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"
