"""Compare finished runs (a multirun sweep or any run directories) without a server.

Reads each run back (``uavgnn.runs.record``: a damaged one is listed as such); finds the config values that
differ between runs, among the keys that define a run (``uavgnn.runs.identity``: how a run was resumed, logged or
fed does not make another); groups runs that differ only by ``seed`` into a seed group named by what its runs share
(``model=tiny``) and adds the group's mean row: mean, std over the seeds and the 95% interval of the mean
(``intervals.mean_interval``: ``compare.interval``'s rule). Writes:

- ``comparison.md`` and the console table: one row per seed group (its mean; ``compare.seed_means=false``: its
  runs too), the final metrics by their readable names, gaps and shares in percent, the best in bold;
- ``comparison.tex``: the same table for a paper, written by pandas' ``Styler.to_latex`` - a ``table`` float
  with caption and label, booktabs rules (``\\usepackage{booktabs}``), numbers right-aligned, each cell the mean
  and its interval;
- ``comparison.csv``: every run and every mean row with the config values that differ, the values as recorded
  (fractions, the keys of ``summary.json``: for programs), std and interval ends;
- ``comparison.png``: learning curves, throughput and a bar per group for each final metric (whiskers: the 95%
  interval of the mean);
- ``comparison.html``: every run, self-contained and sortable. It is written here rather than by ``Styler``:
  each seed group is its own ``<tbody>``, so sorting by any column moves a group's runs and its mean row
  together (Styler writes one body);
- over environment policies' runs, the MARL section (``marl_table``): the runs' own test tables, the IQM per
  algorithm with its stratified-bootstrap interval, and ``marl_eval.json``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from uavgnn.infrastructure.storage import atomic_write, write_json
from uavgnn.reporting import marl_table
from uavgnn.reporting.comparison_page import plot, render_html
from uavgnn.reporting.comparison_rows import (
    Cells,
    best_cells,
    bracket_legend,
    header,
    is_best,
    row_name,
    shown_rows,
    table_rows,
)
from uavgnn.reporting.figures import Metrics
from uavgnn.reporting.run_metrics import differing_keys, group_labels
from uavgnn.reporting.tables import format_table
from uavgnn.runs.layout import MARL_EVAL, comparison_file
from uavgnn.runs.record import Run

__all__ = ["compare_runs", "differing_keys", "group_labels"]


def table(
    rows: list[dict[str, Any]], keys: list[str], metrics: Metrics, seed_means: bool
) -> tuple[list[str], list[dict]]:
    """The shown table (console, markdown): its columns and one dict of text cells per row."""
    cells = Cells(rows, keys, metrics)
    first = "seed group" if seed_means else "run"
    columns = [first, "n", *(header(metrics, m) for m in metrics.final)]
    body = [
        {
            first: row_name(row, rows),
            "n": str(row.get("seeds") or 1),
            **{header(metrics, m): cells(row, m) for m in metrics.final},
        }
        for row in shown_rows(rows, seed_means)
    ]
    return columns, body


def legend(rows: list[dict[str, Any]], keys: list[str], metrics: Metrics, seed_means: bool, bold: str = "bold") -> str:
    """The table's key: what a row shows, its brackets (the kinds that occur), units, directions, the best's mark
    (``bold``: how this form marks it)."""
    first = "Each seed group" if seed_means else "Each run, then each seed group"
    brackets = bracket_legend(Cells(rows, keys, metrics), metrics, seed_means)
    best = best_cells(rows, metrics)
    return (
        f"{first}: mean ± std over its seeds (n){'; ' + brackets if brackets else ''}. Gaps and shares in percent. "
        "↑/↓: higher/lower is better"
        + (f"; {bold}: the best among the groups, ties (as shown) all marked." if best else ".")
    )


def render_markdown(rows: list[dict[str, Any]], keys: list[str], metrics: Metrics, seed_means: bool = True) -> str:
    columns, body = table(rows, keys, metrics, seed_means)
    best = best_cells(rows, metrics)
    shown = shown_rows(rows, seed_means)
    for row, line in zip(shown, body):
        for metric in metrics.final:
            if is_best(best, row, metric):
                line[header(metrics, metric)] = f"**{line[header(metrics, metric)]}**"
    lines = [
        pd.DataFrame(body, columns=columns).to_markdown(
            index=False, colalign=("left",) + ("right",) * (len(columns) - 1)
        ),
        "",
        legend(rows, keys, metrics, seed_means),
    ]
    lines += failures(rows)
    return "\n".join(lines) + "\n"


def failures(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for status in ("failed", "damaged", "incomplete"):
        listed = [r for r in rows if r["status"] == status]
        if listed:
            lines += ["", f"{status.capitalize()} runs:"] + [
                f"- {r['run']}: {r['error'] or 'no summary.json'}" for r in listed
            ]
    return lines


def write_csv(path: Path, rows: list[dict[str, Any]], keys: list[str], metrics: Metrics) -> None:
    ends = ("", "_std", "_ci_low", "_ci_high", "_ci")
    columns = ["run", *keys, "status", *[f"{m}{end}" for m in metrics.final for end in ends], "error"]
    atomic_write(path, pd.DataFrame(rows).reindex(columns=columns).to_csv(index=False).encode())


def render_latex(rows: list[dict[str, Any]], keys: list[str], metrics: Metrics, seed_means: bool = True) -> str:
    """The table for a paper, by pandas' ``Styler.to_latex``: a ``table`` float with caption and label, booktabs
    rules, the row names left and the numbers right-aligned, each header on two lines; per seed group its mean
    and, on the line below, its bracket (a group of one run: its value; ``seed_means=False``: its runs above it);
    the best means in bold where there are two or more, text escaped."""
    shown = shown_rows(rows, seed_means)
    cells, best = Cells(rows, keys, metrics), best_cells(rows, metrics)
    columns = pd.MultiIndex.from_tuples(
        [
            ("seed group" if seed_means else "run", ""),
            ("n", ""),
            *(_two_lines(header(metrics, m)) for m in metrics.final),
        ]
    )
    lines, bold = [], []
    for r in shown:
        parts = [cells.parts(r, m) for m in metrics.final]
        lines.append([row_name(r, rows), str(r.get("seeds") or 1), *(value for value, _ in parts)])
        bold.append(["", "", *("textbf: --rwrap;" if is_best(best, r, m) else "" for m in metrics.final)])
        if any(ends for _, ends in parts):
            lines.append(["", "", *(ends for _, ends in parts)])
            bold.append([""] * len(columns))
    seeds = sorted({int(r["seeds"]) for r in shown if r.get("seeds")})
    counted = f"{seeds[0]}{'-' + str(seeds[-1]) if len(seeds) > 1 else ''} seeds" if seeds else "one run"
    brackets = bracket_legend(cells, metrics, seed_means).replace("%", "\\%")
    caption = (
        f"{'Each' if seed_means else 'Each run, then each'} seed group's mean $\\pm$ std over its {counted} (n)"
        + (f" and, below it, its bracket ({brackets})" if brackets else "")
        + ". Gaps and shares in percent; $\\uparrow$/$\\downarrow$: higher/lower is better"
        + ("; bold: the best." if best else ".")
    )
    frame = pd.DataFrame(lines, columns=columns)
    styler = frame.style.hide(axis="index").format(escape="latex").format_index(escape="latex", axis=1)
    latex = styler.apply(lambda _: pd.DataFrame(bold, columns=columns), axis=None).to_latex(
        hrules=True,
        column_format="l" + "r" * (len(columns) - 1),
        caption=caption,
        label="tab:comparison",
        position="t",
        position_float="centering",
        sparse_columns=False,
    )
    return "% needs \\usepackage{booktabs}\n" + _latex(latex)


def _two_lines(text: str) -> tuple[str, str]:
    """A header split at the space that makes its longer line shortest."""
    words = text.split(" ")
    splits = [(" ".join(words[:i]), " ".join(words[i:])) for i in range(1, len(words))] or [(text, "")]
    return min(splits, key=lambda pair: max(map(len, pair)))


def _latex(text: str) -> str:
    """The symbols LaTeX's text fonts lack, as math; a negative number's sign as a minus, not a hyphen."""
    for symbol, command in (("±", "$\\pm$"), ("†", "$^\\dagger$"), ("↑", "$\\uparrow$"), ("↓", "$\\downarrow$")):
        text = text.replace(symbol, command)
    return re.sub(r"(?<=[\s\[{])-(?=\d)", "$-$", text)


def render_marl(marl: list[Run], keys: list[str], metrics: Metrics) -> tuple[str, list[dict], dict[str, Any]]:
    """The MARL section (``marl_table``) of the runs that trained environment policies: its text (the runs' own
    test tables, the IQM per algorithm), the IQM rows and the marl-eval data; nothing where there are none."""
    if not marl:
        return "", [], {}
    labels = marl_table.algorithm_labels(marl, keys)
    tables = marl_table.test_tables(marl, labels)
    summary = marl_table.aggregate(marl, labels, metrics)
    text = "MARL: each run's own test table (its best policy on its test episodes) and each task's references\n\n"
    text += format_table([marl_table.in_percent(row) for row in tables], list(marl_table.SHOWN.values()))
    text += "\n\ntasks: " + "; ".join(dict.fromkeys(row["task"] for row in tables))
    text += "\n\n" + marl_text(summary, metrics)
    return text, summary, marl_table.marl_eval_data(marl, labels)


def marl_text(summary: list[dict[str, Any]], metrics: Metrics) -> str:
    """The IQM table: per algorithm, each test metric's interquartile mean over its runs and tasks [95%
    stratified-bootstrap interval], in the tables' units."""
    keys = [k for k in metrics.final if k.startswith("test/") and any(k in row for row in summary)]
    body = [
        {
            "algorithm": row["algorithm"],
            "runs": str(row["runs"]),
            "tasks": str(row["tasks"]),
            **{
                metrics.label(k): f"{row[k] * metrics.scale(k):.4g} [{row[f'{k}_low'] * metrics.scale(k):.4g}, "
                f"{row[f'{k}_high'] * metrics.scale(k):.4g}]"
                for k in keys
                if k in row
            },
        }
        for row in summary
    ]
    return (
        "IQM over runs and tasks [95% stratified-bootstrap interval] (rliable's method; marl_eval.json: the runs "
        "in marl-eval's format)\n\n"
        + format_table(body, ["algorithm", "runs", "tasks", *(metrics.label(k) for k in keys)])
    )


def compare_runs(
    runs: list[Run], out_dir: Path, metrics: Metrics, marl: list[Run], seed_means: bool = True, interval: str = "auto"
) -> tuple[list[dict[str, Any]], str]:
    """Write the comparison of ``runs`` (``metrics``: what their algorithms declare; ``marl``: those of them that
    trained environment policies) into ``out_dir``; returns every row (values as recorded) and the console text
    (the table, the failed runs, the MARL section)."""
    keys = differing_keys(runs)
    rows = table_rows(runs, keys, metrics, interval)
    out_dir.mkdir(parents=True, exist_ok=True)
    marl_section, summary, data = render_marl(marl, keys, metrics)
    markdown = render_markdown(rows, keys, metrics, seed_means)
    if marl_section:
        markdown += "\n## MARL\n\n```\n" + marl_section + "\n```\n"
        write_json(out_dir / MARL_EVAL, data)
    atomic_write(out_dir / comparison_file("md"), markdown.encode())
    write_csv(out_dir / comparison_file("csv"), rows, keys, metrics)
    atomic_write(out_dir / comparison_file("tex"), render_latex(rows, keys, metrics, seed_means).encode())
    plot(out_dir / comparison_file("png"), runs, rows, metrics)
    atomic_write(
        out_dir / comparison_file("html"), render_html(rows, keys, out_dir / comparison_file("png"), metrics).encode()
    )
    columns, body = table(rows, keys, metrics, seed_means)
    key = legend(rows, keys, metrics, seed_means, "in comparison.md, .tex and .html bold")
    text = "\n".join([format_table(body, columns), "", key, *failures(rows)])
    return rows, text + ("\n\n" + marl_section if marl_section else "")
