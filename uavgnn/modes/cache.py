"""``mode=cache action=info|verify|clear``: inspect and manage graph caches."""

from __future__ import annotations

from uavgnn.config import Config
from uavgnn.console import echo
from uavgnn.data.cache import cache_entries, clear_cache
from uavgnn.report import format_table


def run_cache(cfg: Config) -> int:
    """Print the caches under ``data.cache_dir``; ``verify`` fails (exit 1) if any is damaged, giving the reason."""
    root = cfg.data.cache_dir
    if cfg.action == "clear":
        echo(f"removed {clear_cache(root)} cache directories from {root}")
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
