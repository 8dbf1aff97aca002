"""Compare finished runs (a multirun sweep or any run directories) without a server.

Reads each run back (``uavgnn.run_record``: a damaged one is listed as such);
finds the config values that differ between runs; groups
runs that differ only by ``seed`` and adds a mean ± std row per group (pandas
``groupby``); and writes ``comparison.md``, ``comparison.csv``,
``comparison.png`` and a self-contained ``comparison.html``.

The HTML table is written here rather than by pandas' ``Styler``: each seed
group is its own ``<tbody>``, so sorting by any column moves a group's runs
and its mean ± std row together (Styler writes one body).
"""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from uavgnn.plots import panel_grid  # noqa: E402
from uavgnn.run_record import Run, find_runs, load_run  # noqa: E402
from uavgnn.storage import atomic_write, save_figure  # noqa: E402

# final metric -> True if higher is better
METRICS = {"best_val_optimality_gap": False, "test/optimality_gap": False, "test/reward": True,
           "test/completion_score": True, "graphs_per_s": True, "peak_mem_mb": False}
FINAL_PANELS = ("best_val_optimality_gap", "test/optimality_gap", "test/completion_score", "test/reward")
IGNORED_PREFIXES = ("hydra", "data.cache_dir", "ckpt", "path")
MEAN = "mean ± std"


def differing_keys(runs: list[Run]) -> list[str]:
    """Config keys whose values are not the same in every run (hydra/path settings ignored)."""
    keys = sorted({k for r in runs for k in r.config if not k.startswith(IGNORED_PREFIXES)})
    return [k for k in keys if len({json.dumps(r.config.get(k), default=str) for r in runs}) > 1]


def group_label(config: dict[str, Any], keys: list[str]) -> str:
    """``model.name=tiny, optim.amp=True``: every swept key but the seed (what a seed group shares)."""
    return ", ".join(f"{k}={config.get(k)}" for k in keys if k != "seed")


def table_rows(runs: list[Run], keys: list[str]) -> list[dict[str, Any]]:
    """One row per run, grouped by their config without the seed; each group of >= 2 ok runs is
    followed by its mean ± std row. ``group`` numbers the groups (first appearance first)."""
    frame = pd.DataFrame([{"run": r.name, **{k: r.config.get(k) for k in keys}, "status": r.status, **r.metrics,
                           "error": r.error, "label": group_label(r.config, keys)} for r in runs])
    for metric in METRICS:
        if metric not in frame:
            frame[metric] = math.nan
    frame["group"] = pd.factorize(frame["label"])[0]
    ok = frame[frame["status"] == "ok"]
    stats = ok.groupby("group")[list(METRICS)].agg(["mean", "std", "count"]) if "seed" in keys else None
    rows: list[dict[str, Any]] = []
    for group, members in frame.groupby("group", sort=False):
        rows += members.to_dict("records")
        seeds = int((members["status"] == "ok").sum())
        if stats is None or seeds < 2:
            continue
        first = members.iloc[0]
        mean = {"run": f"{MEAN} ({seeds} seeds)", **{k: first[k] for k in keys if k != "seed"}, "seed": "*",
                "status": "ok", "error": "", "label": first["label"], "group": group}
        for metric in METRICS:
            if stats.loc[group, (metric, "count")] > 0:
                mean[metric] = float(stats.loc[group, (metric, "mean")])
                mean[f"{metric}_std"] = float(np.nan_to_num(stats.loc[group, (metric, "std")]))
        rows.append(mean)
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()} for row in rows]


def is_mean(row: dict[str, Any]) -> bool:
    return str(row["run"]).startswith(MEAN)


def best_runs(rows: list[dict[str, Any]]) -> dict[str, str]:
    """For each metric, the run (individual runs only) with the best value."""
    best = {}
    for metric, higher in METRICS.items():
        values = [(r[metric], r["run"]) for r in rows if r["status"] == "ok" and not is_mean(r)
                  and isinstance(r.get(metric), float)]
        if values:
            best[metric] = (max if higher else min)(values)[1]
    return best


def _cell(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    if isinstance(value, float):
        text = f"{value:.4g}"
        if row.get(f"{key}_std") is not None:
            text += f" ± {row[f'{key}_std']:.2g}"
        return text
    return "" if value is None else str(value)


def render_markdown(rows: list[dict[str, Any]], keys: list[str], best: dict[str, str]) -> str:
    columns = ["run", *keys, "status", *METRICS]
    cells = [{c: f"**{_cell(row, c)}** (best)" if best.get(c) == row["run"] and c in METRICS else _cell(row, c)
              for c in columns} for row in rows]
    lines = [pd.DataFrame(cells, columns=columns).to_markdown(index=False, stralign="right")]
    for status in ("failed", "damaged"):
        listed = [r for r in rows if r["status"] == status]
        if listed:
            lines += ["", f"{status.capitalize()} runs:"] + [f"- {r['run']}: {r['error']}" for r in listed]
    return "\n".join(lines) + "\n"


def write_csv(path: Path, rows: list[dict[str, Any]], keys: list[str]) -> None:
    columns = ["run", *keys, "status", *[m for metric in METRICS for m in (metric, f"{metric}_std")], "error"]
    atomic_write(path, pd.DataFrame(rows).reindex(columns=columns).to_csv(index=False).encode())


def _curve(runs: list[Run], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Steps, mean, min and max of ``key`` over ``runs`` at the steps every run logged."""
    series = [{h["step"]: h[key] for h in r.history if key in h} for r in runs]
    steps = sorted(set.intersection(*(set(s) for s in series))) if series else []
    if not steps:
        return None
    values = np.array([[s[step] for step in steps] for s in series])
    return np.array(steps), values.mean(0), values.min(0), values.max(0)


def plot(path: Path, runs: list[Run], keys: list[str]) -> None:
    """Learning curves and throughput (one line per seed group, its seeds' min-max as a band),
    then one panel per final metric (group means, whiskers = std over seeds)."""
    ok = [r for r in runs if r.status == "ok"]
    groups: dict[str, list[Run]] = {}
    for r in ok:
        groups.setdefault(group_label(r.config, keys) or r.name, []).append(r)
    finals = [m for m in FINAL_PANELS if any(not math.isnan(r.metrics.get(m, math.nan)) for r in ok)]
    fig, axes = panel_grid(2 + len(finals))
    for i, (label, members) in enumerate(groups.items()):
        colour = f"C{i % 10}"
        name = label if len(members) == 1 else f"{label} ({len(members)} seeds)"
        for ax, key in zip(axes, ("val/optimality_gap", "perf/graphs_per_s")):
            curve = _curve(members, key)
            if curve is None:
                continue
            steps, mean, low, high = curve
            ax.plot(steps, mean, color=colour, marker="o" if len(steps) < 30 else None, ms=3, label=name)
            if len(members) > 1:
                ax.fill_between(steps, low, high, color=colour, alpha=0.2)
    axes[0].set(xlabel="step", ylabel="val optimality gap", title="learning curves (band: min-max over seeds)")
    axes[1].set(xlabel="step", ylabel="graphs/s", title="throughput")
    names = list(groups)
    for ax, metric in zip(axes[2:], finals):
        values = [[r.metrics.get(metric, math.nan) for r in members] for members in groups.values()]
        means = [np.nanmean(v) for v in values]
        spread = [np.nanstd(v, ddof=1) if np.isfinite(v).sum() > 1 else 0.0 for v in values]
        ax.bar(range(len(names)), means, yerr=spread, capsize=4, color=[f"C{i % 10}" for i in range(len(names))])
        ax.set_xticks(range(len(names)), [n.replace(", ", "\n") for n in names], fontsize=7)
        ax.set(ylabel=metric, title=f"{metric} ({'higher' if METRICS[metric] else 'lower'} is better)")
    for ax in axes:
        ax.grid(alpha=0.3)
    for ax in axes[:2]:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 100%; }
.table-wrap { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 14px; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
td { max-width: 18em; overflow-wrap: anywhere; }
th { cursor: pointer; background: #eee; max-width: 9em; vertical-align: bottom; user-select: none; }
th::after { content: " \\2195"; color: #999; }
th[aria-sort=ascending]::after { content: " \\25B2"; color: #000; }
th[aria-sort=descending]::after { content: " \\25BC"; color: #000; }
tbody { border-top: 2px solid #999; }
tr.mean td { font-style: italic; background: #f4f4fb; }
td.best { font-weight: bold; background: #dfd; }
tr.failed td { color: #a00; }
img { max-width: 100%; }
"""

# Sort by the clicked column; a seed group (one tbody) moves as a whole, ordered by its mean row's
# number (else by its first run after sorting), its runs sorted inside it and the mean row kept last. Numbers compare as
# numbers, text as text (numbers first), empty cells last in either direction.
SORT_SCRIPT = """
const table = document.getElementById('runs');
const headers = Array.from(table.tHead.rows[0].cells);
const value = (row, col) => {
  const text = row.cells[col].dataset.value;
  if (text === '') return null;
  const x = Number(text);
  return Number.isNaN(x) ? text : x;
};
const compare = (a, b, dir) => {
  if (a === null || b === null) return (a === null) - (b === null);
  if (typeof a !== typeof b) return typeof a === 'number' ? -1 : 1;
  return dir * (typeof a === 'number' ? a - b : a.localeCompare(b, undefined, {numeric: true}));
};
const representative = (body, col, dir) => {
  const mean = body.querySelector('tr.mean');
  const average = mean ? value(mean, col) : null;
  if (typeof average === 'number') return average;
  return Array.from(body.rows).filter(r => r !== mean).map(r => value(r, col)).sort((a, b) => compare(a, b, dir))[0];
};
headers.forEach((th, col) => th.addEventListener('click', () => {
  const dir = th.getAttribute('aria-sort') === 'ascending' ? -1 : 1;
  headers.forEach(h => h.setAttribute('aria-sort', 'none'));
  th.setAttribute('aria-sort', dir === 1 ? 'ascending' : 'descending');
  const bodies = Array.from(table.tBodies);
  for (const body of bodies) {
    const mean = body.querySelector('tr.mean');
    Array.from(body.rows).filter(r => r !== mean)
      .sort((a, b) => compare(value(a, col), value(b, col), dir)).forEach(r => body.appendChild(r));
    if (mean) body.appendChild(mean);
  }
  bodies.sort((a, b) => compare(representative(a, col, dir), representative(b, col, dir), dir))
    .forEach(b => table.appendChild(b));
}));
window.addEventListener('load', () => {
  const imgs = Array.from(document.images);
  document.body.dataset.imagesLoaded = imgs.length > 0 && imgs.every(i => i.complete && i.naturalWidth > 0);
});
"""


def _header(key: str) -> str:
    """A column name that may wrap after its dots and underscores (``optim.<wbr>amp``)."""
    return html.escape(key).replace(".", ".<wbr>").replace("_", "_<wbr>")


def render_html(rows: list[dict[str, Any]], keys: list[str], best: dict[str, str], png: Path) -> str:
    columns = ["run", *keys, "status", *METRICS]
    head = "".join(f"<th scope='col' aria-sort='none' title='{html.escape(c)}: click to sort'>{_header(c)}</th>"
                   for c in columns)
    bodies = []
    for group in dict.fromkeys(r["group"] for r in rows):
        lines = []
        for row in (r for r in rows if r["group"] == group):
            cells = []
            for c in columns:
                raw = row.get(c)
                mark = " class='best'" if best.get(c) == row["run"] and c in METRICS else ""
                cells.append(f"<td data-value='{html.escape('' if raw is None else str(raw))}'{mark}>"
                             f"{html.escape(_cell(row, c))}</td>")
            kind = "mean" if is_mean(row) else row["status"]
            lines.append(f"<tr class='{kind}'>" + "".join(cells) + "</tr>")
        bodies.append(f"<tbody data-group='{group}'>" + "".join(lines) + "</tbody>")
    image = base64.b64encode(png.read_bytes()).decode()
    runs = sum(not is_mean(r) for r in rows)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>uavgnn run comparison</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{STYLE}</style></head><body>
<h1>Run comparison</h1>
<p>{runs} runs; columns: the config values that differ, then final metrics (best per metric in bold).
Runs that differ only by seed form a group with its mean ± std row (italic). Click a header to sort
(again to reverse); groups stay together.</p>
<div class="table-wrap"><table id="runs"><thead><tr>{head}</tr></thead>
{chr(10).join(bodies)}
</table></div>
<h2>Curves and final metrics</h2>
<img alt="learning curves, throughput and final metrics" src="data:image/png;base64,{image}">
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
    atomic_write(out_dir / "comparison.md", render_markdown(rows, keys, best).encode())
    write_csv(out_dir / "comparison.csv", rows, keys)
    plot(out_dir / "comparison.png", runs, keys)
    atomic_write(out_dir / "comparison.html", render_html(rows, keys, best, out_dir / "comparison.png").encode())
    return rows
