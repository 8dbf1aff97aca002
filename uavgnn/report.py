"""Plain-text tables and JSON files for results people read."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A fixed-width table; floats get 4 significant digits."""
    columns = list(columns or (rows[0].keys() if rows else []))

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "nan" if math.isnan(v) else f"{v:.4g}"
        return "" if v is None else str(v)

    body = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(b[i]) for b in body]) for i, c in enumerate(columns)]
    line = lambda vals: "  ".join(v.rjust(w) for v, w in zip(vals, widths))  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths])] + [line(b) for b in body])


def write_json(path: Path, payload: Any) -> None:
    """Write JSON atomically enough for result files (whole file at once)."""
    path.write_text(json.dumps(payload, indent=2, default=_jsonable))


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
