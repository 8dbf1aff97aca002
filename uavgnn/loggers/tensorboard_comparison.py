"""A comparison's runs as one TensorBoard log directory (``comparison_tensorboard/`` beside ``comparison.html``):
``tensorboard --logdir <it>`` shows every finished run named as the report names it (``model=tiny, seed 0``),
its learning curves and throughput in the Scalars tab, and in the HParams tab one row per run with the keys the
runs differ by as the columns (not every config key) and the report's final metrics in the report's units
(gaps and shares in percent). Written from the runs' records, so it works whatever ``logger`` they trained with;
written anew each time (the previous one replaced at once)."""

from __future__ import annotations

import math
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from uavgnn.reporting.comparison_rows import is_mean, row_name
from uavgnn.reporting.figures import Metrics
from uavgnn.reporting.run_metrics import label_parts
from uavgnn.runs.record import Run


def _number_or_text(value: str) -> float | str | bool:
    """A swept value as HParams sorts and filters it: a number as a number, true/false as a boolean."""
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    try:
        return float(value)
    except ValueError:
        return value


def run_hparams(runs: list[Run], keys: list[str]) -> list[dict[str, Any]]:
    """Each run's values of what the runs differ by, as the report's labels say it (``model``: ``tiny``), and its
    seed where the seeds differ."""
    hparams = [{k: _number_or_text(v) for k, v in parts} for parts in label_parts(runs, keys)]
    if "seed" in keys:
        for run, values in zip(runs, hparams):
            if run.config.get("seed") is not None:
                values["seed"] = run.config["seed"]
    return hparams


def _domain(values: list[Any], hp: Any) -> Any:
    """The values a column takes, as HParams filters and sorts them: numbers as numbers (a float domain), text and
    booleans as their own kinds; none where the kinds mix."""
    if all(isinstance(v, bool) for v in values):
        return hp.Discrete([False, True])
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return hp.Discrete(sorted({float(v) for v in values}))
    if all(isinstance(v, str) for v in values):
        return hp.Discrete(sorted(set(values)))
    return None


def write_comparison(
    runs: list[Run], rows: list[dict[str, Any]], keys: list[str], metrics: Metrics, directory: Path
) -> Path:
    """Write the TensorBoard view of a comparison (``rows``: ``table_rows`` of ``runs``) into ``directory``."""
    from tensorboard.plugins.hparams import summary_v2 as hp
    from torch.utils.tensorboard import SummaryWriter

    by_run = {row["run"]: row for row in rows if not is_mean(row)}
    hparams = dict(zip((r.name for r in runs), run_hparams(runs, keys)))
    swept = sorted({k for values in hparams.values() for k in values})
    columns = [hp.HParam(k, _domain([v[k] for v in hparams.values() if k in v], hp)) for k in swept]
    final = [k for k in metrics.final if any(math.isfinite(r.metrics.get(k, math.nan)) for r in runs)]
    curves = [(c.key, 100.0 if c.percent else 1.0) for c in (*metrics.curves, *metrics.speeds)]
    directory.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    # the experiment (its columns, metrics and their names) in every run's file: at the top it would be a run "."
    experiment = hp.hparams_config_pb(columns, [hp.Metric(k, display_name=metrics.label(k)) for k in final])
    try:
        for run in runs:
            if run.status != "ok":
                continue
            name = re.sub(r"[/\\]", "_", row_name(by_run[run.name], rows))
            with SummaryWriter(log_dir=str(fresh / name)) as writer:
                writer._get_file_writer().add_summary(experiment)
                writer._get_file_writer().add_summary(hp.hparams_pb(hparams[run.name], trial_id=name))
                last = 0
                for entry in run.history:  # the curves the report draws, in its units
                    for key, scale in curves:
                        if key in entry and "step" in entry:
                            writer.add_scalar(key, scale * entry[key], entry["step"])
                    last = max(last, int(entry.get("step", 0)))
                for key in final:  # the HParams table reads each metric's last value
                    if math.isfinite(run.metrics.get(key, math.nan)):
                        writer.add_scalar(key, metrics.scale(key) * run.metrics[key], last)
    except BaseException:  # a write that fails leaves no half-written folder behind
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    if directory.exists():
        old = directory.with_name(f".{directory.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        directory.rename(old)
        fresh.rename(directory)
        shutil.rmtree(old)
    else:
        fresh.rename(directory)
    return directory
