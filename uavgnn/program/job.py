"""Dispatch a composed config to its mode; user errors end with a one-line message; nothing is written into
the run directory before the run is accepted (``uavgnn.runs.directory``), and a directory that was never accepted
is removed again."""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.resources
import logging
import re
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException, SearchPathException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from uavgnn.algorithms.registry import check_config
from uavgnn.algorithms.run_config import training_config
from uavgnn.configuration.modes import MODES
from uavgnn.infrastructure import distributed, signals
from uavgnn.infrastructure.console import attach_run_log, echo, launched_as, say_once
from uavgnn.infrastructure.errors import (
    CheckpointError,
    ConfigError,
    Interrupted,
    MemoryBudgetError,
    ProblemTooLarge,
    RunDirectoryError,
    SceneFileError,
    StorageError,
    TrainingDiverged,
)
from uavgnn.infrastructure.storage import write_json
from uavgnn.infrastructure.threads import apply_threads
from uavgnn.runs import requeue, sweep_worker
from uavgnn.runs.directory import accept, discard_unaccepted, is_accepted, leftovers, refused_job_record, withdraw
from uavgnn.runs.layout import FAILED
from uavgnn.runs.lock import release_lock

USER_ERRORS = (
    ConfigError,
    SceneFileError,
    ProblemTooLarge,
    MemoryBudgetError,
    TrainingDiverged,
    CheckpointError,
    StorageError,
    RunDirectoryError,
    FileNotFoundError,
)


def run_mode(cfg: DictConfig, exits: bool = True) -> float | None:
    """Run ``cfg.mode``. In a multirun a failing job writes ``failed.json`` and returns NaN
    to the sweeper instead of ending the sweep (the sweep's exit code reports it at the end). ``exits=False``
    (``uavgnn.api.train``): a user error is raised as itself once its line is said and its directory tidied, not
    turned into ``SystemExit(2)``."""
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    attach_run_log()
    sweep = HydraConfig.get().mode == RunMode.MULTIRUN
    restore_signals = signals.install(cfg.mode)  # a one-line stop in every phase, not a silent exit 143
    try:
        if sweep:
            return _sweep_job(cfg, out_dir)
        return _dispatch(cfg, out_dir)
    except USER_ERRORS as err:
        echo(f"error: {err}", err=True)
        withdraw(out_dir)  # refused before it wrote anything: nothing is left behind
        if not exits:
            raise
        raise SystemExit(2) from None
    except Interrupted as err:
        echo(str(err), err=True)
        if err.saved_step is not None:  # under a scheduler that can, the job is requeued and resumes
            requeue.requeue(out_dir, err.saved_step, str(err).split(";")[0], err.exit_code)
        _finish(out_dir)
        sweep_worker.exit_worker(err.exit_code)  # a launcher's worker ends here instead of taking more work
        if not exits:
            raise
        raise SystemExit(err.exit_code) from None
    except KeyboardInterrupt:
        echo("interrupted (Ctrl-C)", err=True)
        if not exits:
            raise
        raise SystemExit(130) from None
    finally:
        restore_signals()
        _finish(out_dir)


def _finish(out_dir: Path) -> None:
    """Remove the directory if this process created it for a run never accepted (while still holding its lock,
    so no other process can have claimed it meanwhile), then give the lock up."""
    accepted = is_accepted(out_dir)
    discard_unaccepted(out_dir)
    release_lock(out_dir, accepted)


def _sweep_job(cfg: DictConfig, out_dir: Path) -> float | None:
    try:
        return _dispatch(cfg, out_dir)
    except Interrupted:
        raise  # a signal stops the whole sweep, not just this job
    except Exception as err:  # noqa: BLE001 - one job's failure must not stop the sweep
        echo(f"job failed: {type(err).__name__}: {err}", err=True)
        record = {
            "error": f"{type(err).__name__}: {err}",
            "traceback": traceback.format_exc(),
            "config": OmegaConf.to_container(cfg, resolve=False),
        }
        if leftovers(out_dir) and not is_accepted(out_dir):  # another run's files: left as they are;
            write_json(refused_job_record(out_dir), record)  # the sweep still counts the job as failed
        else:
            accept(out_dir, cfg)
            write_json(out_dir / FAILED, record)
        return float("nan")


def _dispatch(cfg: DictConfig, out_dir: Path) -> float | None:
    """Run the mode; ``train`` returns its best validation gap (the value a sweeper minimises)."""
    distributed.quiet_other_ranks()
    hydra = HydraConfig.get()
    note = replaced_hardware(cfg, hydra.runtime.choices, list(hydra.overrides.task), list(hydra.searchpath))
    if note:
        say_once(note)
    check_resolvable(cfg)
    check_config(cfg)
    if cfg.mode == "train":  # the groups its algorithm never reads are left out of the run's config
        cfg = training_config(cfg, list(HydraConfig.get().overrides.task))
    apply_threads(cfg.hardware.threads)  # before the run record names them, and before any work
    mode = MODES[cfg.mode]
    if mode.accepts_first:
        left = leftovers(out_dir)
        if not left:
            accept(out_dir, cfg)
        else:
            raise RunDirectoryError(
                f"{out_dir} already holds {', '.join(left[:6])}{', ...' if len(left) > 6 else ''}: "
                f"mode={cfg.mode} writes its results into a directory of its own; leave out "
                "hydra.run.dir or choose another"
            )
    module, function = mode.runs.split(":")
    result = getattr(importlib.import_module(module), function)(cfg, out_dir)
    return result if mode.objective else None


def check_resolvable(cfg: DictConfig) -> None:
    """Every interpolation of the config resolves, or a ``ConfigError`` naming the key that does not
    (``model.hidden='${oc.env:NOPE}'``), before any work."""
    try:
        OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "the config"
        cause = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"{key}: cannot be resolved ({cause})") from None


def run(overrides: Sequence[str], run_directory: str | Path | None = None) -> Path:
    """The run ``uavgnn <overrides>`` makes, from Python (``uavgnn.api.train``): composed by Hydra's compose API
    from the packaged configs, then run as Hydra runs a job (uavgnn's checks of the run directory and its lock,
    Hydra's job logging with ``run.log``, ``run_mode``), in the same directory (``run_directory``: as
    ``hydra.run.dir=``); returns it. A user error is raised as itself once its line is said (an override that does
    not compose: a ``ConfigError`` with the command line's line), a refused run's directory removed; the caller's
    logging and Hydra state are its own again after."""
    from hydra import compose, initialize_config_module
    from hydra._internal.callbacks import Callbacks
    from hydra.core.utils import run_job
    from hydra.types import HydraContext

    from uavgnn.algorithms.registry import register_configs

    hydra_overrides = ["hydra.mode=RUN"]  # as the command line's (Hydra's run mode, recorded in hydra.yaml)
    if run_directory is not None:
        plain = re.fullmatch(r"[\w./@:+-]+", str(run_directory))  # as typed on a command line, else quoted
        quoted = "'" + str(run_directory).replace("'", "\\'") + "'"
        hydra_overrides.append(f"hydra.run.dir={run_directory if plain else quoted}")
    register_configs()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level  # the run's logging (run.log) is the caller's again after it
    hydra_config = HydraConfig.instance().cfg  # a Hydra app's own, if the caller is one
    failed: list[Exception] = []

    def task(cfg: DictConfig) -> float | None:
        try:
            return run_mode(cfg, exits=False)
        except Exception as err:
            failed.append(err)  # raised below as itself (Hydra would print the job's overrides first)
            raise

    try:
        with initialize_config_module("uavgnn.conf", version_base="1.3", job_name="run"):
            try:
                cfg = compose("config", overrides=[*overrides, *hydra_overrides], return_hydra_config=True)
            except COMPOSITION_ERRORS as err:
                raise ConfigError(composition_error(err)) from None
            callbacks = Callbacks(cfg)  # as Hydra's own run: uavgnn's checks of the run directory and its lock
            callbacks.on_run_start(config=cfg, config_name="config")
            context = HydraContext(config_loader=GlobalHydra.instance().config_loader(), callbacks=callbacks)
            job = run_job(
                hydra_context=context, task_function=task, config=cfg, job_dir_key="hydra.run.dir", job_subdir_key=None
            )
            callbacks.on_run_end(config=cfg, config_name="config", job_return=job)
            if failed:
                raise failed[0]
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)
        attach_run_log()  # the finished run's run.log no longer hears what this process says
        HydraConfig.instance().cfg = hydra_config
    return Path(job.hydra_cfg.hydra.runtime.output_dir)


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
