"""What a run prints reaches the console and the run directory's ``run.log`` alike, once.

Hydra's file handler only sees log records; tables, summaries and errors
are printed. ``echo`` prints (through tqdm, so progress bars stay intact) and
hands the same text to the file handlers alone, so ``run.log`` is a complete
record of the console without printing anything twice.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from typing import Any

from tqdm import tqdm

_run_log = logging.getLogger("uavgnn.console")
_run_log.propagate = False  # the console already has the text
_run_log.setLevel(logging.INFO)


def attach_run_log() -> None:
    """Send echoed text to the root logger's file handlers (Hydra's ``run.log``); call after Hydra set up logging."""
    logging.raiseExceptions = False  # a full disk must not turn every later log line into a traceback
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and handler not in _run_log.handlers:
            _run_log.addHandler(handler)


def echo(text: str, err: bool = False) -> None:
    """Print ``text`` to stdout (stderr with ``err``) and record it in ``run.log``."""
    tqdm.write(text, file=sys.stderr if err else sys.stdout)
    _run_log.info(text)


def progress(iterable: Iterable | None = None, **settings: Any) -> tqdm:
    """A tqdm bar on stderr, redrawn every 2 s at a terminal; off when stderr is a file or pipe (a cluster
    log, CI), where its redraws would be a stream of carriage returns: the step lines say how far it got."""
    return tqdm(iterable, **{"mininterval": 2.0, "dynamic_ncols": True, **settings,
                             "disable": settings.get("disable", False) or not sys.stderr.isatty()})
