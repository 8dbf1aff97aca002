"""Compare finished runs (a multirun sweep or any run directories) without a server.

Reads each run's ``.hydra/config.yaml``, ``summary.json`` (or ``failed.json``)
and ``metrics.jsonl``; finds the config values that differ between runs; adds
mean +- std rows over runs that differ only by ``seed``; and writes
``comparison.md``, ``comparison.csv``, ``comparison.png`` and a self-contained
``comparison.html`` (sortable table, plots embedded).
"""

from __future__ import annotations

import base64
import csv
import html
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from uavgnn.config import flatten  # noqa: E402
from uavgnn.loggers import read_history  # noqa: E402

# final metric -> True if higher is better
METRICS = {"best_val_optimality_gap": False, "test/optimality_gap": False, "test/reward": True,
           "test/completion_score": True, "graphs_per_s": True, "peak_mem_mb": False}
IGNORED_PREFIXES = ("hydra", "data.cache_dir", "ckpt", "path")


@dataclass
class Run:
    name: str
    directory: Path
    status: str  # ok | failed | incomplete
    config: dict[str, Any]  # flattened: {"model.hidden": 64, ...}
    metrics: dict[str, float]
    history: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""


def is_run(directory: Path) -> bool:
    return any((directory / f).exists() for f in ("summary.json", "failed.json", "metrics.jsonl", ".hydra"))


def find_runs(paths: list[Path]) -> list[Path]:
    """Run directories among ``paths``: each path itself, or (a sweep) its run subdirectories."""
    runs: list[Path] = []
    for path in paths:
        if not path.is_dir():
            raise FileNotFoundError(f"path: {path} is not a directory")
        if is_run(path) and not (path / "multirun.yaml").exists():
            runs.append(path)
        else:
            runs += sorted((p for p in path.iterdir() if p.is_dir() and is_run(p)),
                           key=lambda p: (len(p.name), p.name))
    if not runs:
        raise FileNotFoundError(f"path: no run directories under {', '.join(map(str, paths))}")
    return runs


def load_run(directory: Path) -> Run:
    config_path = directory / ".hydra" / "config.yaml"
    config = flatten(OmegaConf.to_container(OmegaConf.load(config_path), resolve=False)) if config_path.exists() else {}
    history = read_history(directory)
    metrics: dict[str, float] = {}
    if (directory / "summary.json").exists():
        summary = json.loads((directory / "summary.json").read_text())
        metrics["best_val_optimality_gap"] = summary.get("best_val_optimality_gap", math.nan)
        for key in ("test/optimality_gap", "test/reward", "test/completion_score"):
            metrics[key] = summary.get(key, math.nan)
        status, error = "ok", ""
    elif (directory / "failed.json").exists():
        status, error = "failed", json.loads((directory / "failed.json").read_text()).get("error", "")
    else:
        status, error = "incomplete", ""
    speeds = [r["perf/graphs_per_s"] for r in history if "perf/graphs_per_s" in r]
    memory = [r["perf/peak_mem_mb"] for r in history if "perf/peak_mem_mb" in r]
    if status == "ok":
        metrics["graphs_per_s"] = statistics.median(speeds) if speeds else math.nan
        metrics["peak_mem_mb"] = max(memory) if memory else math.nan
    return Run(directory.name, directory, status, config, metrics, history, error)


def differing_keys(runs: list[Run]) -> list[str]:
    """Config keys whose values are not the same in every run (hydra/path settings ignored)."""
    keys = sorted({k for r in runs for k in r.config if not k.startswith(IGNORED_PREFIXES)})
    return [k for k in keys if len({json.dumps(r.config.get(k), default=str) for r in runs}) > 1]


def table_rows(runs: list[Run], keys: list[str]) -> list[dict[str, Any]]:
    """One row per run, then a mean +- std row per group of >= 2 ok runs differing only by seed."""
    rows = [{"run": r.name, **{k: r.config.get(k) for k in keys}, "status": r.status, **r.metrics,
             "error": r.error} for r in runs]
    group_keys = [k for k in keys if k != "seed"]
    groups: dict[str, list[Run]] = {}
    if "seed" in keys:
        for r in runs:
            if r.status == "ok":
                groups.setdefault(json.dumps([r.config.get(k) for k in group_keys], default=str), []).append(r)
    for members in groups.values():
        if len(members) < 2:
            continue
        row: dict[str, Any] = {"run": f"mean +- std ({len(members)} seeds)",
                               **{k: members[0].config.get(k) for k in group_keys}, "seed": "*", "status": "ok"}
        for metric in METRICS:
            values = [m.metrics[metric] for m in members if not math.isnan(m.metrics.get(metric, math.nan))]
            if values:
                row[metric] = statistics.fmean(values)
                row[f"{metric}_std"] = statistics.stdev(values) if len(values) > 1 else 0.0
        rows.append(row)
    return rows


def best_runs(rows: list[dict[str, Any]]) -> dict[str, str]:
    """For each metric, the run (individual runs only) with the best value."""
    best = {}
    for metric, higher in METRICS.items():
        values = [(r[metric], r["run"]) for r in rows if r["status"] == "ok" and "seeds)" not in r["run"]
                  and isinstance(r.get(metric), float) and not math.isnan(r[metric])]
        if values:
            best[metric] = (max if higher else min)(values)[1]
    return best


def _cell(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    if isinstance(value, float):
        text = "nan" if math.isnan(value) else f"{value:.4g}"
        if f"{key}_std" in row:
            text += f" +- {row[f'{key}_std']:.2g}"
        return text
    return "" if value is None else str(value)


def render_markdown(rows: list[dict[str, Any]], keys: list[str], best: dict[str, str]) -> str:
    columns = ["run", *keys, "status", *METRICS]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = []
        for c in columns:
            text = _cell(row, c)
            cells.append(f"**{text}** (best)" if best.get(c) == row["run"] and c in METRICS else text)
        lines.append("| " + " | ".join(cells) + " |")
    failed = [r for r in rows if r["status"] == "failed"]
    if failed:
        lines += ["", "Failed runs:"] + [f"- {r['run']}: {r['error']}" for r in failed]
    return "\n".join(lines) + "\n"


def write_csv(path: Path, rows: list[dict[str, Any]], keys: list[str]) -> None:
    columns = ["run", *keys, "status", *[m for metric in METRICS for m in (metric, f"{metric}_std")], "error"]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def plot(path: Path, runs: list[Run], keys: list[str]) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    ok = [r for r in runs if r.status == "ok"]

    def label(r: Run) -> str:
        return " ".join([r.name] + [f"{k.split('.')[-1]}={r.config.get(k)}" for k in keys if k.endswith(("name", "seed"))])

    for r in ok:
        gap = [(h["step"], h["val/optimality_gap"]) for h in r.history if "val/optimality_gap" in h]
        speed = [(h["step"], h["perf/graphs_per_s"]) for h in r.history if "perf/graphs_per_s" in h]
        if gap:
            axes[0].plot(*zip(*gap), marker="o", label=label(r))
        if speed:
            axes[1].plot(*zip(*speed), label=label(r))
    axes[0].set(xlabel="step", ylabel="val optimality gap", title="learning curves")
    axes[1].set(xlabel="step", ylabel="graphs/s", title="throughput")
    names = [label(r) for r in ok]
    width = 0.8 / 3
    for i, metric in enumerate(("best_val_optimality_gap", "test/optimality_gap", "test/completion_score")):
        axes[2].bar([x + i * width for x in range(len(ok))], [r.metrics.get(metric, math.nan) for r in ok], width,
                    label=metric)
    axes[2].set_xticks([x + width for x in range(len(ok))], names, rotation=30)
    axes[2].set(title="final metrics")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


SORT_SCRIPT = """
document.querySelectorAll('th').forEach((th, col) => th.addEventListener('click', () => {
  const body = th.closest('table').tBodies[0];
  const rows = Array.from(body.rows);
  const asc = th.dataset.asc !== 'true';
  th.dataset.asc = asc;
  const key = r => { const t = r.cells[col].dataset.value; const x = parseFloat(t); return isNaN(x) ? t : x; };
  rows.sort((a, b) => (key(a) > key(b) ? 1 : key(a) < key(b) ? -1 : 0) * (asc ? 1 : -1));
  rows.forEach(r => body.appendChild(r));
}));
window.addEventListener('load', () => {
  const imgs = Array.from(document.images);
  document.body.dataset.imagesLoaded = imgs.length > 0 && imgs.every(i => i.complete && i.naturalWidth > 0);
});
"""


def render_html(rows: list[dict[str, Any]], keys: list[str], best: dict[str, str], png: Path) -> str:
    columns = ["run", *keys, "status", *METRICS]
    head = "".join(f"<th title='click to sort'>{html.escape(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for c in columns:
            raw = row.get(c)
            value = "" if raw is None else str(raw)
            mark = " class='best'" if best.get(c) == row["run"] and c in METRICS else ""
            cells.append(f"<td data-value='{html.escape(value)}'{mark}>{html.escape(_cell(row, c))}</td>")
        body.append(f"<tr class='{row['status']}'>" + "".join(cells) + "</tr>")
    image = base64.b64encode(png.read_bytes()).decode()
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>uavgnn run comparison</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }} table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }} th {{ cursor: pointer; background: #eee; }}
td.best {{ font-weight: bold; background: #dfd; }} tr.failed td {{ color: #a00; }} img {{ max-width: 100%; }}
</style></head><body>
<h1>Run comparison</h1>
<p>{len([r for r in rows if 'seeds)' not in r['run']])} runs; columns: the config values that differ, then final
metrics (best per metric in bold). Click a header to sort.</p>
<table><thead><tr>{head}</tr></thead><tbody>
{chr(10).join(body)}
</tbody></table>
<h2>Curves and final metrics</h2>
<img alt="learning curves and final metrics" src="data:image/png;base64,{image}">
<script>{SORT_SCRIPT}</script>
</body></html>
"""


def compare_runs(paths: list[Path], out_dir: Path) -> list[dict[str, Any]]:
    """Write the comparison files into ``out_dir``; returns the table rows."""
    runs = [load_run(d) for d in find_runs(paths)]
    keys = differing_keys(runs)
    rows = table_rows(runs, keys)
    best = best_runs(rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "comparison.md").write_text(render_markdown(rows, keys, best))
    write_csv(out_dir / "comparison.csv", rows, keys)
    plot(out_dir / "comparison.png", runs, keys)
    (out_dir / "comparison.html").write_text(render_html(rows, keys, best, out_dir / "comparison.png"))
    return rows
