"""Hydra's errors composing a config from the command line, each in one line naming the override at fault, with a
did-you-mean for a group, an option or a key (``modle=small``, ``model=smal``, ``train.stpes=3``)."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable

from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException, SearchPathException
from omegaconf import DictConfig
from omegaconf.errors import ConfigAttributeError, ConfigKeyError

from uavgnn.algorithms.registry import broken_plugins
from uavgnn.infrastructure.console import launched_as

# Hydra's errors composing a config from the command line (an unknown group, option or key, a value of the wrong
# type, an override it cannot parse): each one line, as every user error (``composition_error``)
COMPOSITION_ERRORS = (ConfigCompositionException, OverrideParseException, SearchPathException)


GROUP_PATTERN = re.compile(r"^In '([^']+)': Could not find '([^']+)'")


def composition_error(err: Exception) -> str:
    """Hydra's error composing the config, in one line naming the override at fault, with a did-you-mean for a
    group, an option or a key (``modle=small``, ``model=smal``, ``train.stpes=3``) instead of Hydra's report over
    several lines and its ``+key=value`` hint (which would add a key no part of uavgnn reads)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    lines = lines[: next((i for i, line in enumerate(lines) if line.startswith("Config search path")), len(lines))]
    first = lines[0] if lines else type(err).__name__
    cause = err.__cause__
    if isinstance(err, OverrideParseException):
        see = f" ({lines[1][0].lower()}{lines[1][1:]})" if len(lines) > 1 else ""
        return f"{err.override}: {lines[0]}{see}"
    if isinstance(err, MissingConfigException) and err.options is not None and "/" in (err.missing_cfg_file or ""):
        group, option = err.missing_cfg_file.rsplit("/", 1)
        if group == "algorithm" and option in broken_plugins():
            return broken_plugins()[option]  # a plug-in that does not load fails when chosen
        found = GROUP_PATTERN.match(first)
        named_in = found.group(1) if found and found.group(1) not in ("config", "hydra/config") else None
        line = f"{group}={option}: " + (f"no option {option!r} in {group}" if err.options else f"no group {group}")
        line += f" (named in {named_in})" if named_in else ""
        return line + _did_you_mean(option, list(err.options), f"{group}=", "", "options")
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and "use +" in str(err):
        override = str(err).split("use +", 1)[1].split("\n", 1)[0].strip()
        typed, _, value = override.partition("=")
        full_key = str(cause.full_key or cause.key or typed)
        missing, parent = full_key.rsplit(".", 1)[-1], full_key.rpartition(".")[0]
        node = cause.parent_node
        if isinstance(node, DictConfig):
            keys = [str(key) for key in node.keys() if key != "hydra"]
        elif dataclasses.is_dataclass(cause.object_type):
            keys = [f.name for f in dataclasses.fields(cause.object_type)]
        else:
            keys = []
        rest = typed[len(full_key) :] if typed.startswith(full_key) else ""

        def fits(name: str) -> bool:
            """``name`` takes the rest of the override: ``modle=small`` -> the group with a ``small`` option
            (model, not mode); ``modle.hidden=3`` -> the node with a ``hidden`` key."""
            if rest:
                child = node.get(name) if isinstance(node, DictConfig) else None
                return isinstance(child, DictConfig) and rest[1:].split(".")[0] in child
            return not parent and value in _group_options(name)

        what = f"no key {full_key!r}" if parent else f"no group or key {full_key!r}"
        listing = f"keys of {parent}" if parent else "groups and keys"
        prefix = f"{parent}." if parent else ""
        return f"{override}: {what}" + _did_you_mean(missing, keys, prefix, f"{rest}={value}", listing, fits)
    if cause is not None and first.startswith("Error merging override "):
        detail = str(getattr(cause, "msg", None) or cause).strip().splitlines()[0]
        return f"{first.removeprefix('Error merging override ')}: {detail}"
    detail = str(cause).strip().splitlines()[0] if cause is not None and str(cause).strip() else ""
    return "; ".join([*lines, detail] if detail and detail not in lines else lines) or type(err).__name__


def _group_options(group: str) -> list[str]:
    """The options of config group ``group`` in the running Hydra (none when it is not a group)."""
    if not GlobalHydra.instance().is_initialized():
        return []
    try:
        return GlobalHydra.instance().config_loader().get_group_options(group)
    except Exception:  # noqa: BLE001 - not a group: no options
        return []


def _did_you_mean(
    typed: str, names: list[str], prefix: str, suffix: str, listing: str, fits: Callable[[str], bool] | None = None
) -> str:
    """``; did you mean <prefix><closest><suffix>?`` (the closest name that ``fits``, if one does), or the names
    when none is close (a long list: how to see it)."""
    close = difflib.get_close_matches(typed, names, n=5, cutoff=0.6)
    if close:
        best = next((name for name in close if fits and fits(name)), close[0])
        return f"; did you mean {prefix}{best}{suffix}?"
    if len(names) <= 20:
        return f" ({listing}: {', '.join(sorted(names))})"
    return f" ({launched_as()} --cfg job shows the config)"
