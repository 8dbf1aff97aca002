"""Notes on presets: when an experiment preset, composed after the command line's hardware preset, replaces some
of its keys, the run says which and how to keep them."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf


def group_config(group: str, option: str, searchpath: Sequence[str] = ()) -> DictConfig | None:
    """The config file of ``option`` in ``group`` as written (before composition), from the running Hydra's
    config sources in their search order (a ``--config-dir`` preset too), then ``searchpath`` (``hydra.searchpath``:
    ``file://`` and ``pkg://`` entries); None outside Hydra or when no source has it."""
    if not GlobalHydra.instance().is_initialized():
        return None
    path = f"{group}/{option}"
    for source in GlobalHydra.instance().config_loader().get_sources():
        if source.is_config(path):
            config = source.load_config(path).config
            return config if isinstance(config, DictConfig) else None
    for entry in map(str, searchpath):
        scheme, _, where = entry.partition("://")
        root = Path(where) if scheme == "file" else importlib.resources.files(where) if scheme == "pkg" else None
        file = root / f"{path}.yaml" if root is not None else None
        if file is not None and file.is_file():
            config = OmegaConf.create(file.read_text())
            return config if isinstance(config, DictConfig) else None
    return None


def experiment_hardware(experiment: str, searchpath: Sequence[str] = ()) -> dict[str, Any] | None:
    """The hardware keys an experiment preset sets, its own over those of the presets it includes
    (``experiment=swarm_disrupted`` takes ``experiment=swarm``'s batch size); None when it is not found."""
    config = group_config("experiment", experiment, searchpath)
    if config is None:
        return None
    inherited = {
        key: value
        for entry in config.get("defaults", [])
        if isinstance(entry, str) and entry != "_self_" and "/" not in entry  # the same group's presets, in order
        for key, value in (experiment_hardware(entry, searchpath) or {}).items()
    }
    return inherited | dict(config.get("hardware") or {})


def replaced_hardware(
    cfg: DictConfig, choices: Mapping[str, Any], overrides: Sequence[str], searchpath: Sequence[str] = ()
) -> str | None:
    """One line when the command line chose a hardware preset (``hardware=high_mem``) and the experiment preset,
    composed after it, sets keys of it (``experiment=debug``: ``hardware.batch_size=16``); None when it does not.
    The experiment's values stay (its batch size is sized to its data or its episodes: debug's 128 scenes cannot
    fill high_mem's 512), and the line names the preset's and how to keep them. A preset's ``override /hardware``
    never replaces a command-line ``hardware=`` (Hydra's rule), and a command-line ``hardware.<key>=`` always
    wins."""
    given = {override.lstrip("+~").split("=", 1)[0] for override in overrides}
    hardware, experiment = choices.get("hardware"), choices.get("experiment")
    if "hardware" not in given or not hardware or not experiment:
        return None
    preset = group_config("hardware", hardware, searchpath)
    sets = experiment_hardware(experiment, searchpath)
    if preset is None or sets is None:
        return None
    replaced = [
        (key, cfg.hardware[key], preset[key])
        for key in sets
        if key in preset
        and key in cfg.hardware
        and f"hardware.{key}" not in given
        and cfg.hardware[key] == sets[key] != preset[key]
    ]
    if not replaced:
        return None
    ours = ", ".join(f"hardware.{key}={value}" for key, value, _ in replaced)
    theirs = ", ".join(str(value) for _, _, value in replaced)
    keep = " ".join(f"hardware.{key}={value}" for key, _, value in replaced)
    return (
        f"experiment={experiment} sets {ours} over hardware={hardware}'s {theirs} (sized for the experiment); "
        f"add {keep} to keep the preset's"
    )
