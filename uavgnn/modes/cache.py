"""``mode=cache action=info|verify|clear``: inspect and manage graph caches.

Only directories that prove to be uavgnn cache entries (``uavgnn.data.cache.is_cache_entry``) are listed,
verified or deleted; anything else in ``data.cache_dir`` is named as left alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

from uavgnn.config.schemas import Config
from uavgnn.data.cache import UNFINISHED, cache_entries, clear_cache, clear_refusal, foreign_entries
from uavgnn.infrastructure.console import count, echo
from uavgnn.infrastructure.errors import ConfigError, StorageError
from uavgnn.reporting.tables import format_table


def run_cache(cfg: Config, out_dir: Path) -> None:
    """Print the caches under ``data.cache_dir`` (nothing is written into ``out_dir``); ``verify`` fails (exit 1)
    if any is damaged, giving the reason."""
    root = cfg.data.cache_dir
    if cfg.action == "clear":
        clear(root, cfg.force)
        return
    if cfg.action not in ("info", "verify"):
        raise ValueError(f"action: unknown cache action {cfg.action!r} (expected info, verify or clear)")
    rows = cache_entries(root)
    _say_foreign(root)
    if not rows:
        echo(f"no caches in {root}")
        return
    for row in rows:
        problem = row.pop("problem")
        row["status"] = "ok" if problem is None else problem if problem == UNFINISHED else f"DAMAGED: {problem}"
    echo(format_table(rows))
    damaged = [r["name"] for r in rows if r["status"].startswith("DAMAGED")]
    if cfg.action == "verify":
        echo(
            f"{len(rows) - len(damaged)} intact, {len(damaged)} damaged"
            + (f": {', '.join(damaged)}" if damaged else "")
        )
        if damaged:
            raise SystemExit(1)


def _say_foreign(root: str) -> None:
    others = foreign_entries(root)
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        echo(f"left alone in {root}: {count(len(others), 'entry', 'entries')} that are not uavgnn caches ({shown})")


def clear(root: str, force: bool) -> None:
    """Delete the caches after listing them and saying how much goes: ``force=true``, or a "y" typed at a
    terminal. Nothing but proven cache entries is deleted; a cache directory that is the root, a system or
    home directory or a checkout is refused outright."""
    refusal = clear_refusal(root)
    if refusal:
        raise StorageError(
            f"data.cache_dir={root}: {refusal}: mode=cache action=clear refuses it (it deletes only "
            "uavgnn's cache entries, and only in a directory of their own)"
        )
    entries = cache_entries(root)
    _say_foreign(root)
    if not entries:
        echo(f"no caches in {root}")
        return
    echo(
        format_table([{"name": e["name"], "graphs": e["graphs"], "n_uav": e["n_uav"], "mb": e["mb"]} for e in entries])
    )
    what = f"{count(len(entries), 'cache')} ({sum(e['mb'] for e in entries):.1f} MB) in {root}"
    if not force:
        if not sys.stdin.isatty():
            raise ConfigError(f"mode=cache action=clear would delete {what}: add force=true to confirm")
        if input(f"delete {what}? [y/N] ").strip().lower() not in ("y", "yes"):
            echo("nothing deleted")
            return
    echo(f"removed {count(clear_cache(root), 'cache')} from {root}")
