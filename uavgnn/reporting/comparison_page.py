"""The comparison's picture (learning curves, throughput, final metrics per seed group) and its HTML page (every
run and mean row, sortable, each seed group its own ``<tbody>``)."""

from __future__ import annotations

import base64
import html
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.patches import Patch

from uavgnn.infrastructure.storage import pyplot, save_figure
from uavgnn.reporting.comparison_rows import Cells, best_cells, bracket_legend, header, is_best, is_mean, shown_rows
from uavgnn.reporting.figures import Metrics
from uavgnn.reporting.pictures import legend_below, panel_grid
from uavgnn.runs.record import Run


def _curve(runs: list[Run], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Steps, mean, min and max of ``key`` over ``runs`` at the steps every run logged."""
    series = [{h["step"]: h[key] for h in r.history if key in h} for r in runs]
    steps = sorted(set.intersection(*(set(s) for s in series))) if series else []
    if not steps:
        return None
    values = np.array([[s[step] for step in steps] for s in series])
    return np.array(steps), values.mean(0), values.min(0), values.max(0)


NUMBER = re.compile(r"(?<![\w.])[-+]?\d*\.\d{4,}(?:[eE][-+]?\d+)?|(?<![\w.])[-+]?\d+[eE][-+]?\d+")


def picture_labels(labels: list[str]) -> list[str]:
    """Seed groups' labels short enough for a legend: long numbers to 3 significant digits (an Optuna search's
    ``train.lr=0.0004306195031401898`` as ``lr=0.000431``) and keys by their last part where that names them
    apart; the labels as they are wherever shortening would make two alike."""

    def shorter(label: str, keys: bool) -> str:
        label = NUMBER.sub(lambda m: f"{float(m.group()):.3g}", label)
        if keys:
            label = re.sub(r"(?:(?<=^)|(?<=, ))[\w.+~]+\.(\w+)=", r"\1=", label)
        return label

    for keys in (True, False):
        short = [shorter(label, keys) for label in labels]
        if len(set(short)) == len(set(labels)):
            return short
    return labels


def plot(path: Path, runs: list[Run], rows: list[dict[str, Any]], metrics: Metrics) -> None:
    """Learning curves and throughput (one line per seed group, its seeds' min-max as a band; a panel per
    algorithm's curve), then one panel per final metric drawn as bars (group means in the tables' units,
    whiskers = the tables' bracket: the 95% interval of the mean, or the seeds' range). Sized for a paper's text
    width (three panels a row, 6.9 inches wide, 8-point type); one legend below every panel, each group numbered
    where the bars would not hold their names."""
    labels = {r.name: row["label"] for r in runs for row in rows if not is_mean(row) and row["run"] == r.name}
    groups: dict[str, list[Run]] = {}
    for r in runs:
        if r.status == "ok":
            groups.setdefault(labels.get(r.name) or "all runs", []).append(r)  # no label: they differ by seed alone
    ok = [r for members in groups.values() for r in members]
    finals = [
        m for m in metrics.panels if m in metrics.final and any(math.isfinite(r.metrics.get(m, math.nan)) for r in ok)
    ]
    drawn = [(c, "learning curve") for c in metrics.curves] + [(c, "throughput") for c in metrics.speeds]
    names = list(groups)
    short = picture_labels(names)
    numbered = sum(len(label) + 2 for label in short) > 30  # the names under the bars would overlap: numbers
    entries = []
    for i, (name, label) in enumerate(zip(names, short)):
        seeds = len(groups[name])
        entry = label if seeds == 1 else f"{label} ({seeds} seeds)"
        entries.append(f"{i + 1}: {entry}" if numbered else entry)
    plt = pyplot()
    with plt.rc_context({"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "legend.fontsize": 8}):
        fig, axes = panel_grid(len(drawn) + len(finals), width=2.3, height=2.1)
        fig.set_layout_engine("constrained")
        handles: dict[str, Any] = {}
        for i, (name, entry) in enumerate(zip(names, entries)):
            colour, members = f"C{i % 10}", groups[name]
            handles[entry] = Patch(color=colour)
            for ax, (shown, _) in zip(axes, drawn):
                curve = _curve(members, shown.key)
                if curve is None:
                    continue
                steps, mean, low, high = (curve[0], *(100 * v if shown.percent else v for v in curve[1:]))
                ax.plot(steps, mean, color=colour, lw=1.2, marker="o" if len(steps) < 30 else None, ms=2.5)
                if len(members) > 1:
                    ax.fill_between(steps, low, high, color=colour, alpha=0.2, lw=0)
        for ax, (shown, title) in zip(axes, drawn):
            ax.set(xlabel="step", ylabel=shown.label, title=title)
        shown_by_label = {r["label"] or "all runs": r for r in shown_rows(rows)}
        for ax, metric in zip(axes[len(drawn) :], finals):
            scale = metrics.scale(metric)
            means, whiskers = [], [[], []]
            for name in names:
                row = shown_by_label.get(name, {})
                value = row.get(metric)
                means.append(value * scale if isinstance(value, float) else math.nan)
                low, high = row.get(f"{metric}_ci_low"), row.get(f"{metric}_ci_high")
                whiskers[0].append((value - low) * scale if isinstance(low, float) else 0.0)
                whiskers[1].append((high - value) * scale if isinstance(high, float) else 0.0)
            colours = [f"C{i % 10}" for i in range(len(names))]
            ax.bar(range(len(names)), means, yerr=whiskers, capsize=3, color=colours)
            ticks = [str(i + 1) for i in range(len(names))] if numbered else [s.replace(", ", "\n") for s in short]
            ax.set_xticks(range(len(names)), ticks)
            ax.set(ylabel=metrics.label(metric), title=f"{'higher' if metrics.final[metric] else 'lower'} is better")
        for ax in axes:
            ax.grid(alpha=0.3)
        if any(len(members) > 1 for members in groups.values()):
            handles["band: the seeds' min-max; whiskers: the tables' bracket"] = Patch(color="none")
        legend_below(fig, handles, fontsize=8)
        save_figure(fig, path, dpi=200)
    plt.close(fig)


STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 100%; }
.table-wrap { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 14px; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
td:first-child, th:first-child { text-align: left; }
td { white-space: nowrap; }
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


def render_html(rows: list[dict[str, Any]], keys: list[str], png: Path, metrics: Metrics) -> str:
    """Every run and every mean row (the record; the tables above show the groups), sortable by any column."""
    cells, best = Cells(rows, keys, metrics), best_cells(rows, metrics)
    columns = [("run", "run"), ("group", "seed group"), ("seed", "seed"), ("status", "status")]
    columns += [(m, header(metrics, m)) for m in metrics.final]
    head = "".join(
        f"<th scope='col' aria-sort='none' title='{html.escape(key)}: click to sort'>{html.escape(name)}</th>"
        for key, name in columns
    )
    bodies = []
    for group in dict.fromkeys(r["group"] for r in rows):
        lines = []
        for row in (r for r in rows if r["group"] == group):
            shown = {
                "run": row["run"],
                "group": row["label"] or "all runs",
                "seed": row.get("seed"),
                "status": row["status"],
            }
            tds = []
            for key, _ in columns:
                if key in metrics.final:  # the value ± std, its interval on a line of its own
                    raw = row.get(key)
                    value = "" if not isinstance(raw, float) else repr(raw * metrics.scale(key))
                    mean, ends = cells.parts(row, key)
                    text = html.escape(mean) + (f"<br><small>{html.escape(ends)}</small>" if ends else "")
                else:
                    value = "" if shown[key] is None else str(shown[key])
                    text = html.escape(value)
                mark = " class='best'" if is_best(best, row, key) else ""
                tds.append(f"<td data-value='{html.escape(value)}'{mark}>{text}</td>")
            kind = "mean" if is_mean(row) else row["status"]
            lines.append(f"<tr class='{kind}'>" + "".join(tds) + "</tr>")
        bodies.append(f"<tbody data-group='{group}'>" + "".join(lines) + "</tbody>")
    image = base64.b64encode(png.read_bytes()).decode()
    key = bracket_legend(cells, metrics, seed_means=False)
    brackets = f"; {html.escape(key)}" if key else ""
    runs = sum(not is_mean(r) for r in rows)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>uavgnn run comparison</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{STYLE}</style></head><body>
<h1>Run comparison</h1>
<p>{runs} runs, each seed group followed by its mean row (italic): mean ± std over the seeds{brackets}. Gaps and
shares in percent; ↑/↓: higher/lower is better; bold: the best among the groups' means (and runs with no group),
where there are two or more. Click a header to sort (again to reverse); groups stay together.</p>
<div class="table-wrap"><table id="runs"><thead><tr>{head}</tr></thead>
{chr(10).join(bodies)}
</table></div>
<h2>Curves and final metrics</h2>
<img alt="learning curves, throughput and final metrics" src="data:image/png;base64,{image}">
<script>{SORT_SCRIPT}</script>
</body></html>
"""
