"""Compare finished runs (a multirun sweep or any run directories) without a server.

Reads each run back (``uavgnn.run_record``: a damaged one is listed as such);
finds the config values that differ between runs; groups
runs that differ only by ``seed`` and adds a mean ± std row per group (pandas
``groupby``); and writes ``comparison.md``, ``comparison.csv``,
``comparison.tex`` (LaTeX, for a paper), ``comparison.png`` and a self-contained ``comparison.html``.

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

import numpy as np
import pandas as pd

from uavgnn.modes.run_metrics import Metrics, metrics_of
from uavgnn.plots import panel_grid
from uavgnn.report import ci95
from uavgnn.run_record import Run, find_runs, load_run
from uavgnn.storage import atomic_write, pyplot, save_figure

IGNORED_PREFIXES = ("hydra", "data.cache_dir", "ckpt", "path")
MEAN = "mean ± std"


def differing_keys(runs: list[Run]) -> list[str]:
    """Config keys whose values are not the same in every run (hydra/path settings ignored)."""
    keys = sorted({k for r in runs for k in r.config if not k.startswith(IGNORED_PREFIXES)})
    return [k for k in keys if len({json.dumps(r.config.get(k), default=str) for r in runs}) > 1]


def group_labels(runs: list[Run], keys: list[str]) -> list[str]:
    """What each run's seed group shares, as the user chose it: the command-line overrides that differ between
    runs, seed aside (``model=tiny, optim.amp=true``); runs without their overrides (or whose overrides do not
    tell them apart): every differing config key but the seed (``model.name=tiny``)."""
    by_key = [dict(o.split("=", 1) for o in r.overrides if "=" in o) for r in runs]
    varied = sorted({k for o in by_key for k in o if k != "seed" and len({d.get(k) for d in by_key}) > 1})
    from_config = [", ".join(f"{k}={r.config.get(k)}" for k in keys if k != "seed") for r in runs]
    from_overrides = [", ".join(f"{k}={o[k]}" for k in varied if k in o) for o in by_key]
    distinct = len(set(zip(from_config, from_overrides))) == len(set(from_overrides))
    return from_overrides if all(r.overrides for r in runs) and distinct else from_config


def table_rows(runs: list[Run], keys: list[str], metrics: Metrics) -> list[dict[str, Any]]:
    """One row per run, grouped by their config without the seed; each group of >= 2 ok runs is
    followed by its mean ± std row and the 95% interval of the mean (Student's t). ``group`` numbers the
    groups (first appearance first)."""
    frame = pd.DataFrame([{"run": r.name, **{k: r.config.get(k) for k in keys}, "status": r.status, **r.metrics,
                           "error": r.error, "label": label} for r, label in zip(runs, group_labels(runs, keys))])
    for metric in metrics.final:
        if metric not in frame:
            frame[metric] = math.nan
    frame["group"] = pd.factorize(frame["label"])[0]
    ok = frame[frame["status"] == "ok"]
    stats = ok.groupby("group")[list(metrics.final)].agg(["mean", "std", "count"]) if "seed" in keys else None
    rows: list[dict[str, Any]] = []
    for group, members in frame.groupby("group", sort=False):
        rows += members.to_dict("records")
        seeds = int((members["status"] == "ok").sum())
        if stats is None or seeds < 2:
            continue
        first = members.iloc[0]
        mean = {"run": f"{MEAN} ({seeds} seeds)", **{k: first[k] for k in keys if k != "seed"}, "seed": "*",
                "status": "ok", "error": "", "label": first["label"], "group": group}
        for metric in metrics.final:
            count = int(stats.loc[group, (metric, "count")])
            if count > 0:
                mean[metric] = float(stats.loc[group, (metric, "mean")])
                mean[f"{metric}_std"] = float(np.nan_to_num(stats.loc[group, (metric, "std")]))
                if count > 1:
                    mean[f"{metric}_ci95"] = ci95(mean[f"{metric}_std"], count)
        rows.append(mean)
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()} for row in rows]


def table_columns(keys: list[str], metrics: Metrics) -> list[str]:
    """The columns every table shows: the run, the config values that differ, its status, the final metrics."""
    return ["run", *keys, "status", *metrics.final]


def is_mean(row: dict[str, Any]) -> bool:
    return str(row["run"]).startswith(MEAN)


def best_cells(rows: list[dict[str, Any]], metrics: Metrics) -> dict[str, set[str]]:
    """For each metric, the rows holding the best value as shown (4 significant digits: ties all count) among
    what a reader compares: each seed group's mean row, and the runs of groups that have none."""
    averaged = {r["group"] for r in rows if is_mean(r)}
    candidates = [r for r in rows if r["status"] == "ok" and (is_mean(r) or r["group"] not in averaged)]
    best: dict[str, set[str]] = {}
    for metric, higher in metrics.final.items():
        values = [(r[metric], r["run"], r["group"]) for r in candidates if isinstance(r.get(metric), float)]
        if values:
            top = _number((max if higher else min)(v for v, _, _ in values), 4)
            best[metric] = {(run, group) for v, run, group in values if _number(v, 4) == top}
    return best


def is_best(best: dict[str, set[str]], row: dict[str, Any], column: str) -> bool:
    return (row["run"], row["group"]) in best.get(column, set())


def cell(row: dict[str, Any], key: str) -> str:
    """A value as every table shows it: 4 significant digits; a group's mean with ± its std over seeds and
    [the 95% interval of the mean]."""
    value = row.get(key)
    if isinstance(value, float):
        text = _number(value, 4)
        if row.get(f"{key}_std") is not None:
            text += f" ± {_number(row[f'{key}_std'], 2)}"
        if row.get(f"{key}_ci95") is not None:
            text += f" [{_number(value - row[f'{key}_ci95'], 4)}, {_number(value + row[f'{key}_ci95'], 4)}]"
        return text
    return "" if value is None else str(value)


def _number(value: float, digits: int) -> str:
    """``digits`` significant digits, without an exponent below a billion (660, not 6.6e+02)."""
    text = f"{value:.{digits}g}"
    return f"{value:.0f}" if "e+" in text and abs(value) < 1e9 else text


LEGEND = ("Bold: the best per metric among the seed groups' means (and runs with no group to average), ties all "
          "bold. ± std over seeds; [95% interval of the mean, Student's t].")


def render_markdown(rows: list[dict[str, Any]], keys: list[str], best: dict[str, set[str]], metrics: Metrics) -> str:
    columns = table_columns(keys, metrics)
    cells = [{c: f"**{cell(row, c)}**" if is_best(best, row, c) else cell(row, c) for c in columns} for row in rows]
    lines = [pd.DataFrame(cells, columns=columns).to_markdown(index=False, stralign="right"), "", LEGEND]
    for status in ("failed", "damaged"):
        listed = [r for r in rows if r["status"] == status]
        if listed:
            lines += ["", f"{status.capitalize()} runs:"] + [f"- {r['run']}: {r['error']}" for r in listed]
    return "\n".join(lines) + "\n"


def write_csv(path: Path, rows: list[dict[str, Any]], keys: list[str], metrics: Metrics) -> None:
    columns = ["run", *keys, "status", *[m for metric in metrics.final for m in (metric, f"{metric}_std",
                                                                                  f"{metric}_ci95")], "error"]
    atomic_write(path, pd.DataFrame(rows).reindex(columns=columns).to_csv(index=False).encode())


def render_latex(rows: list[dict[str, Any]], keys: list[str], best: dict[str, set[str]], metrics: Metrics) -> str:
    """The table for a paper (pandas' Styler): the runs that finished, the best cells in bold, text escaped."""
    columns = ["run", *keys, *metrics.final]
    shown = [r for r in rows if r["status"] == "ok"]
    frame = pd.DataFrame([{c: cell(r, c) for c in columns} for r in shown], columns=columns)
    bold = pd.DataFrame([{c: "textbf: --rwrap;" if is_best(best, r, c) else "" for c in columns} for r in shown],
                        columns=columns)
    styler = frame.style.hide(axis="index").format(escape="latex").format_index(escape="latex", axis=1)
    latex = styler.apply(lambda _: bold, axis=None).to_latex(hrules=True, column_format="l" * len(columns))
    return latex.replace("±", r"$\pm$")


def _curve(runs: list[Run], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Steps, mean, min and max of ``key`` over ``runs`` at the steps every run logged."""
    series = [{h["step"]: h[key] for h in r.history if key in h} for r in runs]
    steps = sorted(set.intersection(*(set(s) for s in series))) if series else []
    if not steps:
        return None
    values = np.array([[s[step] for step in steps] for s in series])
    return np.array(steps), values.mean(0), values.min(0), values.max(0)


def plot(path: Path, runs: list[Run], keys: list[str], metrics: Metrics) -> None:
    """Learning curves and throughput (one line per seed group, its seeds' min-max as a band; a panel per
    algorithm's curve), then one panel per final metric (group means, whiskers = std over seeds)."""
    groups: dict[str, list[Run]] = {}
    for r, label in zip(runs, group_labels(runs, keys)):
        if r.status == "ok":
            groups.setdefault(label or "all runs", []).append(r)  # no label: they differ by seed alone
    ok = [r for members in groups.values() for r in members]
    finals = [m for m in metrics.panels if any(not math.isnan(r.metrics.get(m, math.nan)) for r in ok)]
    drawn = [(c, "learning curves (band: min-max over seeds)") for c in metrics.curves]
    drawn += [(c, "throughput") for c in metrics.speeds]
    fig, axes = panel_grid(len(drawn) + len(finals))
    for i, (label, members) in enumerate(groups.items()):
        colour = f"C{i % 10}"
        name = label if len(members) == 1 else f"{label} ({len(members)} seeds)"
        for ax, (shown, _) in zip(axes, drawn):
            curve = _curve(members, shown.key)
            if curve is None:
                continue
            steps, mean, low, high = curve
            ax.plot(steps, mean, color=colour, marker="o" if len(steps) < 30 else None, ms=3, label=name)
            if len(members) > 1:
                ax.fill_between(steps, low, high, color=colour, alpha=0.2)
    for ax, (shown, title) in zip(axes, drawn):
        ax.set(xlabel="step", ylabel=shown.label, title=title)
    names = list(groups)
    for ax, metric in zip(axes[len(drawn):], finals):
        values = [[r.metrics.get(metric, math.nan) for r in members] for members in groups.values()]
        means = [np.nanmean(v) if np.isfinite(v).any() else math.nan for v in values]  # a group without it: none
        spread = [np.nanstd(v, ddof=1) if np.isfinite(v).sum() > 1 else 0.0 for v in values]
        ax.bar(range(len(names)), means, yerr=spread, capsize=4, color=[f"C{i % 10}" for i in range(len(names))])
        ax.set_xticks(range(len(names)), [n.replace(", ", "\n") for n in names], fontsize=7)
        ax.set(ylabel=metric, title=f"{metric} ({'higher' if metrics.final[metric] else 'lower'} is better)")
    for ax in axes:
        ax.grid(alpha=0.3)
    for ax in axes[:len(drawn)]:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    pyplot().close(fig)


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


def render_html(rows: list[dict[str, Any]], keys: list[str], best: dict[str, set[str]], png: Path,
                metrics: Metrics) -> str:
    columns = table_columns(keys, metrics)
    head = "".join(f"<th scope='col' aria-sort='none' title='{html.escape(c)}: click to sort'>{_header(c)}</th>"
                   for c in columns)
    bodies = []
    for group in dict.fromkeys(r["group"] for r in rows):
        lines = []
        for row in (r for r in rows if r["group"] == group):
            cells = []
            for c in columns:
                raw = row.get(c)
                mark = " class='best'" if is_best(best, row, c) else ""
                cells.append(f"<td data-value='{html.escape('' if raw is None else str(raw))}'{mark}>"
                             f"{html.escape(cell(row, c))}</td>")
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
<p>{runs} runs; columns: the config values that differ, then final metrics. Runs that differ only by seed
form a group with its mean ± std row (italic). {html.escape(LEGEND)} Click a header to sort (again to
reverse); groups stay together.</p>
<div class="table-wrap"><table id="runs"><thead><tr>{head}</tr></thead>
{chr(10).join(bodies)}
</table></div>
<h2>Curves and final metrics</h2>
<img alt="learning curves, throughput and final metrics" src="data:image/png;base64,{image}">
<script>{SORT_SCRIPT}</script>
</body></html>
"""


def compare_runs(paths: list[Path], out_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Write the comparison files into ``out_dir``; returns the table rows and the columns they show."""
    runs = [load_run(d) for d in find_runs(paths)]
    keys, metrics = differing_keys(runs), metrics_of(runs)
    rows = table_rows(runs, keys, metrics)
    best = best_cells(rows, metrics)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(out_dir / "comparison.md", render_markdown(rows, keys, best, metrics).encode())
    write_csv(out_dir / "comparison.csv", rows, keys, metrics)
    atomic_write(out_dir / "comparison.tex", render_latex(rows, keys, best, metrics).encode())
    plot(out_dir / "comparison.png", runs, keys, metrics)
    atomic_write(out_dir / "comparison.html",
                 render_html(rows, keys, best, out_dir / "comparison.png", metrics).encode())
    return rows, table_columns(keys, metrics)
