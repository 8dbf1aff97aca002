"""Nested config containers as flat ``{"group.key": value}`` maps: what runs compare, record and log."""

from __future__ import annotations

import json
from typing import Any


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config container as ``{"model.hidden": 64, ...}``; lists as JSON text (hashable, comparable)."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: json.dumps(node) if isinstance(node, list) else node}
