"""A run directory is written only once its run is accepted: a refused run leaves the directory as it was.

Hydra writes ``.hydra/`` (config, overrides) and opens ``run.log`` before any of uavgnn's checks, so a fresh
run refused a directory that holds a run, or a refused resume, used to rewrite the record of the run it
refused to touch. Here Hydra writes nothing itself (``hydra.output_subdir: null``; ``run.log`` is a
``console.RunLogHandler`` that keeps its lines in memory); ``accept`` writes Hydra's record and starts
``run.log`` once the mode has decided to go ahead: at once in a directory that holds no run, after every
resume check in one that does. A directory this process created and never accepted is removed at the end.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.console import command_line, hydra_quoted, start_run_log
from uavgnn.infrastructure.device import resolve_device
from uavgnn.infrastructure.errors import ConfigError, RunDirectoryError
from uavgnn.infrastructure.storage import atomic_write
from uavgnn.runs.history import stream_history
from uavgnn.runs.identity import is_incidental
from uavgnn.runs.layout import (
    ATTEMPT_FILES,
    BOOKKEEPING,
    FAILED,
    HYDRA_CONFIG,
    HYDRA_OVERRIDES,
    HYDRA_RECORD,
    HYDRA_SETTINGS,
    REFUSED_PREFIX,
    RUN_FILES,
    SWEEP_RECORD,
)
from uavgnn.runs.manifest import manifest_lines, run_manifest

FILE_MANAGER_NOTES = {".DS_Store", "Thumbs.db", "desktop.ini"}  # written by macOS and Windows into any folder seen
JOB_DIR_CHARS = 120  # a sweep job's folder name at most (file systems allow 255 bytes)

_accepted: set[Path] = set()
_created: set[Path] = set()


def held_run_files(directory: Path) -> list[str]:
    """The files of ``RUN_FILES`` that ``directory`` holds (a run lives there when any does)."""
    return [name for name in RUN_FILES if (directory / name).exists()]


def leftovers(directory: Path) -> list[str]:
    """What ``directory`` holds besides the bookkeeping of a run (``.hydra``, ``run.log``, the lock), an empty
    history and a file manager's notes: anything a fresh run there could overwrite, so it must start elsewhere."""
    if not directory.is_dir():
        return []
    return sorted(
        p.name
        for p in directory.iterdir()
        if p.name not in BOOKKEEPING | FILE_MANAGER_NOTES
        and not (p.name == RUN_FILES[0] and p.is_file() and p.stat().st_size == 0)
    )


def refuse_leftovers(directory: Path, mode: str, left: list[str]) -> RunDirectoryError:
    """The one line refusing a mode that writes its results into a directory of its own a directory holding
    ``left`` (``leftovers``)."""
    shown = ", ".join(left[:6]) + (", ..." if len(left) > 6 else "")
    return RunDirectoryError(
        f"{directory} already holds {shown}: mode={mode} writes its results into a directory of its own; leave out "
        "hydra.run.dir or choose another"
    )


def swept_keys(sweep_dir: Path) -> set[str]:
    """The keys a sweep varies (``model=tiny,small`` -> ``model``), from its ``multirun.yaml``."""
    path = sweep_dir / SWEEP_RECORD
    if not path.exists():
        return set()
    task = OmegaConf.load(path).hydra.overrides.task
    return {o.split("=")[0] for o in map(str, task) if "," in o.split("=", 1)[-1] or "(" in o.split("=", 1)[-1]}


def job_dir_name(number: int, sweep_dir: str, overrides: str) -> str:
    """A sweep job's folder, ``hydra.sweep.subdir``: its number, then the overrides the sweep varies
    (``3-model:tiny+seed:1``; all of them when it varies none by itself, e.g. an Optuna search), but those that
    do not define a run (``uavgnn.runs.identity``: a re-issued sweep finds its jobs' folders). Only
    characters a Hydra override takes unquoted (``hydra.run.dir=<it> resume=auto`` works as typed), at most
    ``JOB_DIR_CHARS``."""
    items = re.split(r",(?=[\w.+~-]+=)", overrides) if overrides else []  # Hydra's override_dirname
    items = [item for item in items if not is_incidental(item.split("=")[0].lstrip("+~"))]
    swept = swept_keys(Path(sweep_dir))
    items = [item for item in items if item.split("=")[0] in swept] or items
    name = "-".join([str(number), "+".join(item.replace("=", ":", 1) for item in items)]) if items else str(number)
    return re.sub(r"[^\w.:+@-]", "_", name)[:JOB_DIR_CHARS]


def job_number(name: str) -> tuple[int, str]:
    """Sort key of a sweep job's folder (``job_dir_name``): by its number, then by name."""
    head = name.split("-", 1)[0]
    return (int(head) if head.isdigit() else -1, name)


def refused_job_record(directory: Path) -> Path:
    """Where a sweep job refused its directory (it holds another run's files) records the failure: beside it,
    in the sweep's directory, so the sweep counts it without writing into the directory it refused."""
    return directory.parent / f"{REFUSED_PREFIX}{directory.name}.json"


def clear_failure_records(directory: Path) -> None:
    """Remove the records of earlier failures of the run in ``directory`` (its ``failed.json``, the sweep's
    ``failed-<job>.json``): it has now been accepted or found finished, so they no longer say anything true."""
    for record in (directory / FAILED, refused_job_record(directory)):
        record.unlink(missing_ok=True)


def note_created(directory: Path) -> None:
    """Remember which of ``directory`` and its parents this process is about to create (they do not exist
    yet): if the run is never accepted, ``discard_unaccepted`` removes them again, and nothing else."""
    directory = directory.resolve()
    while not directory.exists():
        _created.add(directory)
        directory = directory.parent


def is_accepted(directory: Path) -> bool:
    return directory.resolve() in _accepted


def accept(directory: Path, cfg: DictConfig) -> None:
    """The run goes ahead in ``directory``: write Hydra's record of it (``.hydra/config.yaml``, ``hydra.yaml``,
    ``overrides.yaml``, each atomically; rank 0 of a data-parallel run) and start ``run.log`` with the run manifest
    and what was said so far."""
    directory = directory.resolve()
    if directory in _accepted:
        return
    if HydraConfig.initialized() and distributed.context().is_main:
        hydra_cfg = HydraConfig.instance().cfg
        record = directory / HYDRA_RECORD
        record.mkdir(parents=True, exist_ok=True)
        for name, content in (
            (HYDRA_CONFIG, cfg),
            (HYDRA_SETTINGS, hydra_cfg),
            (HYDRA_OVERRIDES, hydra_cfg.hydra.overrides.task),
        ):
            atomic_write(record / name, OmegaConf.to_yaml(content).encode())
    start_run_log(manifest_lines(run_manifest(_device_of(cfg))))
    _accepted.add(directory)


def _device_of(cfg: DictConfig) -> str:
    """The run's device as the manifest names it (the preset's name when it cannot be resolved yet)."""
    try:
        name = str(OmegaConf.select(cfg, "hardware.device", default="cpu"))
        return str(resolve_device(name))
    except (ConfigError, OmegaConfBaseException) as err:  # e.g. a failed job's unresolvable interpolation
        return f"unresolved ({type(err).__name__})"


def continue_command(directory: Path, *extra: str) -> str:
    """The command that continues the run in ``directory`` where it stopped: the launch's overrides with
    ``extra`` (``resume=auto``) and ``hydra.run.dir`` in place of their own, pasteable as printed
    (``console.command_line``); in a sweep, the sweep's (``sweep_command``)."""
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:  # a sweep's job: the sweep's
        sweep_dir = Path(HydraConfig.get().sweep.dir).resolve()
        try:
            return sweep_command(sweep_dir, OmegaConf.load(sweep_dir / SWEEP_RECORD).hydra.overrides.task)
        except (OSError, OmegaConfBaseException, AttributeError):  # its record unreadable: this job alone
            pass
    overrides = [str(o) for o in HydraConfig.get().overrides.task] if HydraConfig.initialized() else []
    replaced = tuple(f"{o.split('=')[0]}=" for o in [*extra, "hydra.run.dir="])
    kept = [o for o in overrides if not o.startswith(replaced)]
    return command_line([*kept, *extra, hydra_quoted("hydra.run.dir", str(directory))])


def sweep_command(sweep_dir: Path, overrides: Sequence[Any]) -> str:
    """The command that continues the sweep in ``sweep_dir`` launched with ``overrides``: the same sweep with
    ``resume=auto`` (finished jobs are found finished, stopped ones resume) into the same directory."""
    kept = [str(o) for o in overrides if not str(o).startswith(("resume=", "hydra.sweep.dir="))]
    return command_line(["-m", *kept, "resume=auto", hydra_quoted("hydra.sweep.dir", str(Path(sweep_dir).resolve()))])


def withdraw(directory: Path) -> None:
    """A run refused in one line after it was accepted, before it wrote anything but its bookkeeping (a memory
    estimate, a solver's size limit): no longer accepted, so ``discard_unaccepted`` removes the directory if
    this process created it. A directory holding anything more keeps it and its record."""
    directory = directory.resolve()
    if directory.is_dir() and not {p.name for p in directory.iterdir()} - BOOKKEEPING:
        _accepted.discard(directory)


def discard_untrained(directory: Path) -> None:
    """A training run that failed before it logged a step: the directory goes if this process created it and it
    holds nothing but what such an attempt leaves (``ATTEMPT_FILES``: a history of no training row, the
    dashboards' start), as if it was never accepted. Anything more - a logged step, a checkpoint, another mode's
    results - stays."""
    directory = directory.resolve()
    if directory not in _created or not directory.is_dir():
        return
    if not set(leftovers(directory)) <= ATTEMPT_FILES:
        return
    try:
        if any(key.startswith("train/") for row in stream_history(directory) for key in row):
            return  # a step was logged
    except RunDirectoryError:
        return
    _accepted.discard(directory)  # discard_unaccepted removes the directory with its bookkeeping
    for entry in directory.iterdir():
        if entry.name not in BOOKKEEPING:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def discard_unaccepted(directory: Path) -> None:
    """Remove ``directory`` if this process created it, never accepted a run there and nothing but
    bookkeeping is inside; then the parents this process created that are left empty (``outputs/<date>``)."""
    directory = directory.resolve()
    if directory in _accepted or directory not in _created or not directory.is_dir():
        return
    if {p.name for p in directory.iterdir()} - BOOKKEEPING:
        return
    shutil.rmtree(directory, ignore_errors=True)
    for parent in directory.parents:
        if parent not in _created:
            break
        try:
            parent.rmdir()
        except OSError:  # not empty: another run lives there now
            break


def discard_refused_sweep() -> None:
    """A sweep refused before any job ran (a job's config does not compose) after Hydra made its directory and
    wrote ``multirun.yaml`` there: a directory this process created that holds only that goes again, and the
    parents it created that are left empty."""
    for directory in sorted(_created, key=lambda path: len(path.parts), reverse=True):
        if directory.is_dir() and {p.name for p in directory.iterdir()} == {SWEEP_RECORD}:
            (directory / SWEEP_RECORD).unlink()
            discard_unaccepted(directory)
