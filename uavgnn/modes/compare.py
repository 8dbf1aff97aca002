"""``mode=compare path=<sweep dir>`` (or ``path=[run, run, ...]``): the comparison report.

A single ``path`` receives the files; a list writes them into this run's directory.
"""

from __future__ import annotations

from pathlib import Path

from uavgnn import run_dir
from uavgnn.config import Config
from uavgnn.console import echo
from uavgnn.errors import ConfigError, RunDirectoryError
from uavgnn.modes.sweep_report import cell, compare_runs
from uavgnn.report import format_table


def run_compare(cfg: Config, out_dir: Path) -> list[dict]:
    if cfg.path is None:
        raise ConfigError("mode=compare needs path=<sweep directory> or path=[run_dir,run_dir,...]")
    paths = [Path(p) for p in cfg.path] if not isinstance(cfg.path, str) else [Path(cfg.path)]
    target = paths[0] if len(paths) == 1 else out_dir
    if target == out_dir:
        left = run_dir.leftovers(out_dir)
        if left:
            raise RunDirectoryError(f"{out_dir} already holds {', '.join(left[:6])}: mode=compare writes its report "
                                    "into a directory of its own; leave out hydra.run.dir or choose another")
        run_dir.accept(out_dir, cfg)
    rows, columns = compare_runs(paths, target)
    echo(format_table([{c: cell(row, c) for c in columns} for row in rows], columns))  # means with ± std, [95%]
    echo(f"wrote comparison.md, comparison.csv, comparison.tex, comparison.png and comparison.html into {target}")
    return rows
