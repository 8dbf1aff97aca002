"""Plain-text tables and JSON files for results people read."""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

TABLE_WIDTH = 120  # characters: a wider table wraps its headers, then continues in blocks below (format_table)
GAP = 2  # characters between columns
# gaps and shares of a reference, shown in percent as the README, the docs, the pictures and mode=compare show them
# (the rows themselves, in summary.json and eval.json, keep the recorded fractions)
PERCENT = ("optimality_gap", "gap_ci95", "bound_gap", "gap_vs_milp", "planner_gap", "of_planner", "of_nominal_planner")


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Plain text (no colour codes, so ``run.log`` reads the same) at most ``TABLE_WIDTH`` characters wide.
    A wider table of one row is shown as name/value pairs; of more rows, it breaks its headers after ``_``,
    ``.`` and ``/``; if it still does not fit, its columns continue in further blocks below, each starting
    with the leading columns that tell the rows apart; a long text cell wraps inside its column. Floats get
    4 significant digits; the ``PERCENT`` columns are in percent, 2 decimals."""
    keys = list(columns or (rows[0].keys() if rows else []))
    body = [[_cell(row.get(c), c in PERCENT) for c in keys] for row in rows]
    columns = [f"{c} (%)" if c in PERCENT else c for c in keys]
    content = [max((len(line[i]) for line in body), default=0) for i in range(len(columns))]
    if sum(max(len(c), w) for c, w in zip(columns, content)) + GAP * (len(columns) - 1) <= TABLE_WIDTH:
        return _render(columns, body, range(len(columns)))
    if len(rows) == 1:  # one record: a column of names and values reads better than wrapped headers
        return _render(["name", "value"], [[c, v] for c, v in zip(columns, body[0])], range(2))
    headers = [_wrapped_header(c, max(w, 10)) for c, w in zip(columns, content)]
    widths = [max(max(map(len, h.splitlines())), min(w, TABLE_WIDTH // 2)) for h, w in zip(headers, content)]
    key = next((k for k in range(1, 5) if len({tuple(line[:k]) for line in body}) == len(body)), 1)
    key_width = sum(widths[:key]) + GAP * (key - 1)
    blocks, used = [list(range(key))], key_width
    for i in range(key, len(columns)):
        if used + GAP + widths[i] > TABLE_WIDTH and len(blocks[-1]) > key:
            blocks.append(list(range(key)))
            used = key_width
        blocks[-1].append(i)
        used += GAP + widths[i]
    return "\n\n".join(_render(headers, body, block) for block in blocks)


def _render(headers: list[str], body: list[list[str]], which: Sequence[int]) -> str:
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        header_style="",
        safe_box=True,
        padding=(0, GAP // 2),
        collapse_padding=True,
    )
    for i in which:  # the row's name to the left, values to the right
        table.add_column(
            Text(headers[i]),
            justify="left" if i == 0 else "right",
            overflow="fold",
            min_width=max(map(len, headers[i].splitlines()), default=0),
        )
    for line in body:  # as Text: a cell reads as written ("[min 1, max 2]" is no markup to rich)
        table.add_row(*(Text(line[i]) for i in which))
    console = Console(file=io.StringIO(), width=TABLE_WIDTH, color_system=None, legacy_windows=False)
    console.print(table)
    return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines())


def _wrapped_header(name: str, width: int) -> str:
    """``completion_score`` as ``completion_`` over ``score`` when its values are narrower than its name."""
    spaced = name.replace("_", "_ ").replace(".", ". ").replace("/", "/ ")
    lines = textwrap.wrap(spaced, width=max(width, 1), break_long_words=False)
    return "\n".join(line.replace("_ ", "_").replace(". ", ".").replace("/ ", "/") for line in lines)


def _cell(value: Any, percent: bool = False) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{100 * value:.2f}" if percent else f"{value:.4g}"
    return "" if value is None else str(value)


def markdown_table(columns: Sequence[str], data: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table (TensorBoard's text tab, BENCHMARKS.md); ``None`` cells stay empty."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in data])
