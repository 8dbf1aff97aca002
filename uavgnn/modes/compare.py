"""``mode=compare path=<sweep dir>`` (or ``path=[run, run, ...]``): the comparison report.

A single ``path`` receives the files; a list writes them into this run's directory. Runs that differ only by
their seed form a seed group, shown by its mean over the seeds (``uavgnn.reporting.comparison``). Options (the
``compare`` group):

- ``compare.metrics=[test/optimality_gap,graphs_per_s]``: these final metrics alone, in this order (by the keys
  the runs record; the default, ``[]``: every one their algorithms declare);
- ``compare.seed_means=false``: the console, ``comparison.md`` and ``comparison.tex`` list each group's runs
  too (``comparison.csv`` and ``comparison.html`` always do);
- ``compare.interval``: the 95% interval of a group's mean, never one outside the metric's range (a gap below 0,
  a share above 100%; each metric declares its range, ``Score.bounds``):

  - ``auto`` (default): Student's t with 3 seeds or more where its interval lies inside the range; otherwise
    (2 seeds, or a t interval that would leave the range) the percentile bootstrap of the mean, marked †, which
    stays inside the values observed (with 2 seeds: [the smaller, the larger]); 1 seed: n/a;
  - ``t``: Student's t where it lies inside the range, else n/a (no clipped interval);
  - ``bootstrap``: the percentile bootstrap (10,000 resamples, fixed seed) from 2 seeds on.

Gaps and shares are shown in percent everywhere (console, markdown, LaTeX, HTML, the picture);
``comparison.csv`` keeps the values as recorded (the fractions of ``summary.json``). Runs of environment policies
add the MARL section: each run's own test table, the IQM per algorithm with its stratified-bootstrap interval,
and ``marl_eval.json`` (``uavgnn.reporting.marl_table``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from uavgnn.algorithms.compared import environment_policy_runs, metrics_of
from uavgnn.config.schemas import Config
from uavgnn.infrastructure.console import echo, python_command
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.loggers.tensorboard_comparison import write_comparison
from uavgnn.reporting.comparison import compare_runs
from uavgnn.reporting.intervals import METHODS
from uavgnn.reporting.run_metrics import differing_keys
from uavgnn.runs.directory import accept, leftovers, refuse_leftovers
from uavgnn.runs.layout import COMPARISON_TENSORBOARD, MARL_EVAL, comparison_file
from uavgnn.runs.record import find_runs, load_run


def run_compare(cfg: Config, out_dir: Path) -> list[dict]:
    if cfg.path is None:
        raise ConfigError("mode=compare needs path=<sweep directory> or path=[run_dir,run_dir,...]")
    options = cfg.compare
    if options.interval not in METHODS:
        raise ConfigError(f"compare.interval={options.interval!r} is not one of {', '.join(METHODS)}")
    paths = [Path(p) for p in cfg.path] if not isinstance(cfg.path, str) else [Path(cfg.path)]
    target = paths[0] if len(paths) == 1 else out_dir
    if target == out_dir:
        left = leftovers(out_dir)
        if left:
            raise refuse_leftovers(out_dir, "compare", left)
        accept(out_dir, cfg)
    rows, text = compare_paths(paths, target, list(options.metrics), bool(options.seed_means), str(options.interval))
    echo(text)
    marl = f", {MARL_EVAL}" if (target / MARL_EVAL).exists() else ""
    forms = ", ".join(comparison_file(suffix) for suffix in ("md", "csv", "tex", "png", "html"))
    echo(f"wrote {forms}{marl} and {COMPARISON_TENSORBOARD}/ into {target}")
    echo(
        f"in TensorBoard: {python_command('-m', 'tensorboard.main', '--logdir', str(target / COMPARISON_TENSORBOARD))}"
    )
    return rows


def compare_paths(
    paths: list[Path], out_dir: Path, metrics: list[str] = (), seed_means: bool = True, interval: str = "auto"
) -> tuple[list[dict[str, Any]], str]:
    """The comparison of the runs under ``paths`` (run or sweep directories) written into ``out_dir``, showing what
    their algorithms declare (``metrics``: those final metrics alone); its rows and console text."""
    runs = [load_run(directory) for directory in find_runs(paths)]
    shown = metrics_of(runs).only(list(metrics))
    rows, text = compare_runs(runs, out_dir, shown, environment_policy_runs(runs), seed_means, interval)
    write_comparison(runs, rows, differing_keys(runs), shown, out_dir / COMPARISON_TENSORBOARD)
    return rows, text
