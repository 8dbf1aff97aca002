"""Write docs/configuration.md, the configuration reference, from the typed schemas.

Every key of the root schema (``uavgnn.config.schemas.Config``), of each model kind (``model_schemas()``) and
of each algorithm (``algorithms()``, each ``.config``), with its type, default, valid values
(``uavgnn.config.validation``: ``CHOICES``, ``RANGES``, a ``ranged`` field's range) and the ``# comment`` on
its field in the source (or, where the field has none, on its key in the group's default YAML); each group's
options are the YAML files under ``uavgnn/conf/<group>/``. ``tests/test_docs.py`` checks that the committed page
is what this writes:

    .venv/bin/python scripts/config_reference.py
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import math
import re
import sys
import textwrap
import tokenize
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "configuration.md"
CONF = ROOT / "uavgnn" / "conf"
PLUG_INS = ("model", "algorithm")  # Config's groups whose schema is the chosen option's (a model kind, an algorithm)
OTHER_GROUPS = ("experiment", "hparams_search", "hydra/launcher")  # options without a schema of their own


def field_comments(schema: type) -> dict[str, str]:
    """Each field's comment: the one after it (with its aligned continuation lines), else those just above it;
    a subclass's comment replaces its base's."""
    found: dict[str, str] = {}
    for klass in reversed(schema.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        text = textwrap.dedent(inspect.getsource(klass))
        comments = {
            tok.start[0]: tok.string[1:]
            for tok in tokenize.generate_tokens(io.StringIO(text).readline)
            if tok.type == tokenize.COMMENT
        }
        lines = text.splitlines()
        for node in ast.parse(text).body[0].body:
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            after = [comments[n] for n in range(node.lineno, node.end_lineno + 1) if n in comments]
            row = node.end_lineno + 1
            while after and row in comments and lines[row - 1].strip().startswith("#  "):
                after.append(comments[row])  # a continuation: "#" then the text aligned under the comment
                row += 1
            above, row = [], node.lineno - 1
            while row in comments and lines[row - 1].strip().startswith("# "):
                above.insert(0, comments[row])
                row -= 1
            found[node.target.id] = " ".join(part.strip() for part in after or above)
    return found


def yaml_comments(path: Path) -> dict[str, str]:
    """The comment after each top-level key of a group's YAML file (continuation lines joined)."""
    found: dict[str, str] = {}
    key = None
    for line in path.read_text().splitlines() if path.exists() else []:
        match = re.match(r"([A-Za-z_]\w*):[^#]*#\s?(.*)$", line)
        if match:
            key, found[match[1]] = match[1], match[2].strip()
        elif key and re.match(r"\s+#", line):
            found[key] += " " + line.strip().lstrip("#").strip()
        else:
            key = None
    return found


def first_comment(path: Path) -> str:
    """An option's description: the first sentence of the comment its YAML file starts with."""
    block = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        if not line.startswith("# @package"):
            block.append(line.lstrip("#").strip())
    return re.split(r"(?<=\.)\s", " ".join(block) + " ", maxsplit=1)[0].strip()


def shown(value: Any) -> str:
    """A default as it is written on the command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(shown, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(value) + "}"
    return '""' if value == "" else "required" if value == "???" else str(value)


def valid(key: str, field: dataclasses.Field) -> str:
    from uavgnn.config.validation import CHOICES, ITEM_CHOICES, RANGES

    if key in CHOICES:
        return " | ".join(CHOICES[key])
    if key in ITEM_CHOICES:
        return "each of " + ", ".join(ITEM_CHOICES[key])
    limits = field.metadata.get("range") or RANGES.get(key)
    if limits is None:
        return ""
    low, high = (int(x) if math.isfinite(x) and x == int(x) else x for x in (limits.low, limits.high))
    if high == math.inf:
        return f"{'>' if limits.low_open else '>='} {low}"
    return f"in {'(' if limits.low_open else '['}{low}, {high}{')' if limits.high_open else ']'}"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def default_of(field: dataclasses.Field) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None if field.default is dataclasses.MISSING else field.default


def is_group(field: dataclasses.Field) -> bool:
    """A field of the root schema that is a group of keys (its own section)."""
    return field.name in PLUG_INS or dataclasses.is_dataclass(default_of(field))


def key_table(schema: type, prefix: str, fallback: dict[str, str]) -> list[str]:
    """One row per key: key, type, default, valid values, meaning."""
    comments = field_comments(schema)
    rows = ["| key | type | default | valid | meaning |", "|---|---|---|---|---|"]
    for field in dataclasses.fields(schema):
        if is_group(field):
            continue
        default = default_of(field)
        key = f"{prefix}{field.name}"
        meaning = comments.get(field.name) or fallback.get(field.name, "")
        rows.append(
            f"| `{key}` | `{cell(str(field.type))}` | `{cell(shown(default))}` | {cell(valid(key, field))} "
            f"| {cell(meaning)} |"
        )
    return rows


def options(group: str, default: str | None) -> list[str]:
    """The group's options, one line each: its YAML file's first comment."""
    out = []
    for path in sorted((CONF / group).glob("*.yaml")):
        mark = " (default)" if path.stem == default else ""
        out.append(f"- [`{path.stem}`](../uavgnn/conf/{group}/{path.name}){mark}: {first_comment(path)}")
    return out


def schema_of(path: Path) -> str | None:
    match = re.search(r"/schema@[\w_]+:\s*(\w+)", path.read_text())
    return match[1] if match else None


def render() -> str:
    """The whole page."""
    from uavgnn.algorithms.registry import algorithms, model_schemas
    from uavgnn.config.schemas import Config

    chosen = dict(re.findall(r"^  - (\w+): (\w+)", (CONF / "config.yaml").read_text(), re.M))
    out = [
        "# Configuration reference",
        "",
        "Generated from the typed schemas by `.venv/bin/python scripts/config_reference.py` (do not edit by hand;",
        "`tests/test_docs.py` checks it is current). Every key is set on the command line as `group.key=value`",
        "(`train.steps=300`) and every group is swapped whole as `group=option` (`hardware=high_mem`). Defaults are",
        "the schema's, which are those of `python run.py` with no arguments but for `train.steps` (1,500 in",
        "`experiment=dev`); an option's YAML file changes some of them. *valid* is checked before any work",
        "(`uavgnn/config/validation.py`).",
        "",
        "## Top level",
        "",
        *key_table(Config, "", yaml_comments(CONF / "config.yaml")),
    ]
    for field in filter(is_group, dataclasses.fields(Config)):
        group = field.name
        out += ["", f"## `{group}`", "", *options(group, chosen.get(group)), ""]
        if group == "model":
            for kind, schema in model_schemas().items():
                sizes = [p.stem for p in sorted((CONF / "model").glob("*.yaml")) if schema_of(p) == kind]
                out += [f"### `{kind}` (`model={'|'.join(sizes)}`)", "", *key_table(schema, "model.", {}), ""]
        elif group == "algorithm":
            for name, algorithm in sorted(algorithms().items()):
                if not algorithm.__module__.startswith("uavgnn."):
                    continue  # an installed plug-in documents itself
                picks = [p.stem for p in sorted((CONF / "algorithm").glob("*.yaml")) if schema_of(p) == name]
                out += [f"### `{name}`: {algorithm.summary()} (`algorithm={'|'.join(picks)}`)", ""]
                out += [*key_table(algorithm.config, "algorithm.", {}), ""]
        else:
            default = CONF / group / f"{chosen.get(group, 'default')}.yaml"
            out += [*key_table(type(default_of(field)), f"{group}.", yaml_comments(default)), ""]
        out.pop()
    for group in OTHER_GROUPS:
        out += ["", f"## `{group}`", "", *options(group, chosen.get(group))]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    PAGE.write_text(render())
    print(f"wrote {PAGE.relative_to(ROOT)}")
