"""Your own code, named by a ``_target_``-style path (``mypkg.module.name``, importable from where you run):
a scene generator (``task.generator``), an environment class (``env.target``)."""

from __future__ import annotations

import hashlib
import importlib
import inspect
import traceback
from typing import Any

from uavgnn.infrastructure.errors import ConfigError


def import_named(path: str, key: str) -> Any:
    """The object ``path`` names; a path that is not ``module.name`` or does not import is one line naming
    ``key``."""
    parts = path.split(".") if isinstance(path, str) else []
    if len(parts) < 2 or not all(part.isidentifier() for part in parts):
        raise ConfigError(
            f"{key}={path}: not a dotted path of Python names; give module.name (e.g. "
            "mypkg.module.MyClass), importable from where you run"
        )
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ConfigError(
            f"{key}={path}: cannot import it ({err}); give module.name, importable from where you run (PYTHONPATH)"
        ) from None


def source_digest(obj: Any) -> str | None:
    """SHA-256 of ``obj``'s source code, so that data made by edited code is new data; None where there is no
    source to read (a builtin, a compiled module): its path names it then."""
    try:
        return hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()
    except (OSError, TypeError):
        return None


def frames_in(err: BaseException, classes: list[type]) -> list[traceback.FrameSummary]:
    """The frames of ``err``'s traceback in the source files of ``classes`` (your code), innermost last."""
    files = set()
    for cls in classes:
        try:
            files.add(inspect.getsourcefile(cls))
        except TypeError:  # a builtin: no file of its own
            continue
    return [frame for frame in traceback.extract_tb(err.__traceback__) if frame.filename in files]
