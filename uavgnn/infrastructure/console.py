"""What a run prints reaches the console and the run directory's ``run.log`` alike, once.

Hydra's file handler only sees log records; tables, summaries and errors
are printed. ``echo`` prints (through tqdm, so progress bars stay intact) and
hands the same text to the file handlers alone, so ``run.log`` is a complete
record of the console without printing anything twice. ``run.log`` itself is a
``RunLogHandler`` (``conf/hydra/job_logging/uavgnn.yaml``): nothing reaches the
file before the run is accepted (``uavgnn.runs.directory``), so a refused run leaves
the log of the run it refused as it was.
"""

from __future__ import annotations

import io
import logging
import math
import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

_run_log = logging.getLogger("uavgnn.infrastructure.console")
_run_log.propagate = False  # the console already has the text
_run_log.setLevel(logging.INFO)


class RunLogHandler(logging.FileHandler):
    """Hydra's ``run.log``, opened only by ``start``: until then its records wait in memory (a refused run
    writes nothing into the directory), then they are written first, in order."""

    def __init__(self, filename: str, mode: str = "a", encoding: str | None = None) -> None:
        super().__init__(filename, mode, encoding, delay=True)
        self.waiting: list[logging.LogRecord] | None = []

    def emit(self, record: logging.LogRecord) -> None:
        if self.waiting is not None:
            self.waiting.append(record)
        else:
            super().emit(record)

    def start(self, header: Sequence[str] = ()) -> None:
        waiting, self.waiting = self.waiting or [], None
        lines = [logging.LogRecord(_run_log.name, logging.INFO, __file__, 0, line, None, None) for line in header]
        for record in [*lines, *waiting]:
            super().emit(record)


def start_run_log(header: Sequence[str] = ()) -> None:
    """Open ``run.log`` (the run was accepted): every ``RunLogHandler`` writes ``header`` (the run manifest), then
    what it kept, and goes on."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, RunLogHandler):
            handler.start(header)


def attach_run_log() -> None:
    """Send echoed text to the root logger's file handlers (Hydra's ``run.log``); call after Hydra set up logging."""
    logging.raiseExceptions = False  # a full disk must not turn every later log line into a traceback
    files = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    for handler in list(_run_log.handlers):  # an earlier job's run.log (a sweep in one process): not this job's
        if handler not in files:
            _run_log.removeHandler(handler)
    for handler in files:
        if handler not in _run_log.handlers:
            _run_log.addHandler(handler)


def launched_as() -> str:
    """How this process was started, as a command the user can paste into the shell they started it from: the
    interpreter that is running (``.venv/bin/python``, the one with the dependencies, unless the shell's
    ``python`` is that one) with ``run.py`` or ``-m uavgnn``, or the ``uavgnn`` script (by name where the shell
    finds this one)."""
    program = Path(sys.argv[0])
    if program.name == "__main__.py":
        return f"{_interpreter()} -m uavgnn"
    if program.suffix == ".py":
        return f"{_interpreter()} {shlex.quote(_shown(program))}"
    found = shutil.which(program.name)
    return program.name if found and _same_file(found, program) else shlex.quote(_shown(program))


def command_line(overrides: Sequence[str]) -> str:
    """``launched_as()`` with ``overrides`` as Hydra reads them (the command line's own, or made by
    ``hydra_quoted``), each shell-quoted (a space, a ``$``): pasted into a shell, the same words reach Hydra."""
    return " ".join([launched_as(), *map(shlex.quote, overrides)])


HYDRA_BARE = re.compile(r"[A-Za-z0-9_/+.%*@?|:-]+(?: +[A-Za-z0-9_/+.%*@?|:-]+)*")  # bare in Hydra's grammar


def hydra_quoted(key: str, value: str) -> str:
    """``key=value`` for a value the program made (a directory): in Hydra's quotes unless its grammar takes it
    bare (an accent, an emoji, a quote, a ``~``, a comma - a sweep - or brackets would be misread)."""
    if HYDRA_BARE.fullmatch(value):
        return f"{key}={value}"
    quote = "'" if "'" not in value else '"' if '"' not in value else "'"
    backslash = "\\"
    body = value.replace(quote, backslash + quote)
    body += backslash * (len(body) - len(body.rstrip(backslash)))  # backslashes before the closing quote: doubled
    return f"{key}={quote}{body}{quote}"


def python_command(*args: str) -> str:
    """``python <args>`` with the running interpreter (as ``launched_as`` names it), each argument shell-quoted: a
    tool installed beside uavgnn, run as the user can paste it (``python -m tensorboard.main --logdir ...``)."""
    return " ".join([_interpreter(), *(shlex.quote(_shown(Path(a)) if os.sep in a else a) for a in args)])


def _interpreter() -> str:
    found = shutil.which("python")
    return "python" if found and _same_file(found, Path(sys.executable)) else shlex.quote(_shown(Path(sys.executable)))


def _same_file(found: str, path: Path) -> bool:
    """The same path (a virtual environment's ``python`` is a link to the system's: the link is what counts)."""
    return os.path.abspath(found) == os.path.abspath(path)


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when inside it (``.venv/bin/python``), else absolute."""
    absolute = Path(os.path.abspath(path))
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


def echo(text: str, err: bool = False) -> None:
    """Print ``text`` to stdout (stderr with ``err``) and record it in ``run.log``."""
    tqdm.write(text, file=sys.stderr if err else sys.stdout)
    _run_log.info(text)


class Countdown:
    """Work in pieces whose durations were estimated before it started: after each piece, the time so far and
    what is left, by the estimate corrected with the pace measured so far (measured / estimated)."""

    def __init__(self, expected: dict[Any, float]) -> None:
        self.expected, self.finished = expected, set()
        self.start = time.perf_counter()

    @property
    def total_s(self) -> float:
        return sum(self.expected.values())

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.start

    def finish(self, piece: Any) -> str:
        """``piece`` is done: the line that says so."""
        self.finished.add(piece)
        elapsed = self.elapsed_s
        pace = elapsed / max(sum(self.expected[p] for p in self.finished), 1e-9)
        left = pace * sum(seconds for p, seconds in self.expected.items() if p not in self.finished)
        return f"    done in {elapsed:.0f} s so far; about {left:.0f} s left"


class StatusLines(tqdm):
    """tqdm off a terminal (a cluster log, CI): the bar as one plain line when it starts, every
    ``every_s`` seconds and when it closes, never a carriage-return redraw or a cleared line."""

    every_s = 30.0

    def clear(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to erase: lines already written stay."""

    def display(self, msg: str | None = None, pos: int | None = None, final: bool = False) -> bool:
        now = time.monotonic()
        last_n, last_time = getattr(self, "_last_line", (None, -math.inf))
        if msg == "" or self.n == last_n or (not final and now - last_time < self.every_s):
            return True
        self._last_line = (self.n, now)
        self.fp.write(self.__str__() + "\n")
        self.fp.flush()
        return True

    def close(self) -> None:
        if not self.disable:
            self.display(final=True)
            fp, self.fp = self.fp, io.StringIO()  # tqdm's own close only writes redraw characters
            super().close()
            self.fp = fp


def progress(iterable: Iterable | None = None, **settings: Any) -> tqdm:
    """A tqdm bar on stderr: redrawn every 2 s at a terminal; in a file or pipe, ``StatusLines``."""
    if sys.stderr.isatty():
        return tqdm(iterable, **{"mininterval": 2.0, "dynamic_ncols": True, **settings})
    return StatusLines(iterable, **{"ascii": True, "ncols": 100, **settings})


_said: set[str] = set()
NOTES = "uavgnn.notes"  # the logger of say_once's warnings: to the console and run.log, as every log record


def say_once(message: str) -> None:
    """A warning a run gives once however often the code that finds it runs (the device is resolved in several
    places). Its logger is looked up when it speaks: one made earlier could have been switched off since by a
    logging config that disables the loggers it does not name."""
    if message not in _said:
        _said.add(message)
        logging.getLogger(NOTES).warning(message)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 scene``, ``2 scenes`` (``plural`` where adding an s is wrong): a number with its noun in the right form."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {plural or noun + 's'}"
