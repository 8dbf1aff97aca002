"""``mode=cache action=info|verify|clear``: inspect and manage graph caches."""

from __future__ import annotations

import sys

from uavgnn.config import Config
from uavgnn.console import echo
from uavgnn.data.cache import cache_entries, clear_cache
from uavgnn.errors import ConfigError
from uavgnn.report import count, format_table


def run_cache(cfg: Config) -> int:
    """Print the caches under ``data.cache_dir``; ``verify`` fails (exit 1) if any is damaged, giving the reason."""
    root = cfg.data.cache_dir
    if cfg.action == "clear":
        clear(root, cfg.force)
        return 0
    if cfg.action not in ("info", "verify"):
        raise ValueError(f"action: unknown cache action {cfg.action!r} (expected info, verify or clear)")
    rows = cache_entries(root)
    if not rows:
        echo(f"no caches in {root}")
        return 0
    for row in rows:
        problem = row.pop("problem")
        row["status"] = "ok" if problem is None else f"DAMAGED: {problem}"
    echo(format_table(rows))
    damaged = [r["name"] for r in rows if r["status"] != "ok"]
    if cfg.action == "verify":
        echo(f"{len(rows) - len(damaged)} intact, {len(damaged)} damaged" + (f": {', '.join(damaged)}" if damaged else ""))
        return 1 if damaged else 0
    return 0


def clear(root: str, force: bool) -> None:
    """Delete the caches after saying how much goes: ``force=true``, or a "y" typed at a terminal."""
    entries = cache_entries(root)
    if not entries:
        echo(f"no caches in {root}")
        return
    what = f"{count(len(entries), 'cache')} ({sum(e['mb'] for e in entries):.1f} MB) in {root}"
    if not force:
        if not sys.stdin.isatty():
            raise ConfigError(f"mode=cache action=clear would delete {what}: add force=true to confirm")
        if input(f"delete {what}? [y/N] ").strip().lower() not in ("y", "yes"):
            echo("nothing deleted")
            return
    echo(f"removed {count(clear_cache(root), 'cache')} from {root}")
