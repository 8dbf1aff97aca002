"""Metric logging: a jsonl history always, plus wandb or TensorBoard; never blocks training.

Each dashboard back-end is called through ``_guarded``: the first failure (no
network, no account, a full disk) is reported once as a warning and that
back-end is switched off, while the jsonl file and training carry on.
"""

from __future__ import annotations

import json
import logging
import math
import re
import secrets
import string
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

from uavgnn.infrastructure.console import echo
from uavgnn.infrastructure.device import resolve_device
from uavgnn.infrastructure.errors import RunDirectoryError
from uavgnn.infrastructure.nested import flatten
from uavgnn.infrastructure.storage import atomic_write, storage_error
from uavgnn.reporting.tables import markdown_table
from uavgnn.runs.directory import swept_keys
from uavgnn.runs.layout import HISTORY, TENSORBOARD_DIR, WANDB_DIR, WANDB_RUN_ID
from uavgnn.runs.manifest import manifest_lines, run_manifest

log = logging.getLogger(__name__)


# wandb summary semantics: the best value where "best" is clear, else the last one
SUMMARIES = {
    "val/optimality_gap": "min",
    "val/planner_gap": "min",
    "val/k_step_rmse": "min",
    "val/return": "max",
    "perf/graphs_per_s": "mean",
    "perf/peak_mem_mb": "max",
    "train/loss": "min",
}


def path_label(directory: Path) -> str:
    """A wandb-safe label of a directory (``multirun/2026-11-22/12-00-00`` -> ``2026-11-22_12-00-00``):
    a sweep's group."""
    parts = [p for p in directory.resolve().parts[1:][-3:] if p not in ("outputs", "multirun")]
    return re.sub(r"[^A-Za-z0-9_.-]", "-", "_".join(parts))[-120:]


def run_id(out_dir: Path) -> str:
    """This run directory's wandb id: random on the first start, then read back, so a resumed run continues
    its wandb run whatever the folders around it are called."""
    path = out_dir / WANDB_RUN_ID
    if path.exists():
        return path.read_text().strip()
    new = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))  # wandb's id form
    atomic_write(path, new.encode())
    return new


@dataclass(frozen=True)
class RunContext:
    """How a run shows on the dashboard: display name, group (its sweep), tags and job type (its mode)."""

    name: str | None = None
    group: str | None = None
    tags: tuple[str, ...] = ()
    job_type: str | None = None


def run_context(job_type: str | None = None) -> RunContext:
    """wandb display name (a sweep job's swept overrides, ``model=tiny,seed=0``), group (the sweep
    directory) and tags: the chosen config-group options (``model:small``) plus the other short overrides
    (``optim.amp=true``; ``model=small`` would repeat ``model:small``)."""
    if not HydraConfig.initialized():
        return RunContext(job_type=job_type)
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    group = path_label(Path(hc.sweep.dir)) if multirun else None
    overrides = [str(o) for o in hc.overrides.task if "/" not in str(o)]  # paths make poor names
    swept = swept_keys(Path(hc.sweep.dir)) if multirun else set()
    name = None
    if multirun:
        name = ",".join(o for o in overrides if o.split("=")[0] in swept) or ",".join(overrides) or None
    choices = {g: o for g, o in hc.runtime.choices.items() if not g.startswith("hydra") and o and g != "uavgnn_schema"}
    tags = [f"{g}:{o}" for g, o in choices.items()]
    tags += [o for o in overrides if len(o) <= 64 and o.split("=")[0].lstrip("+~") not in choices]
    return RunContext(name, group, tuple(sorted(set(tags))), job_type)


def publish(
    cfg, out_dir: Path, tables: dict[str, list[dict[str, Any]]], images: dict[str, Path], summary: dict[str, Any]
) -> None:
    """The results of a mode without a training loop (eval, benchmark, profile) on the configured dashboard:
    one run with its tables, pictures and headline values."""
    logger = open_logger(cfg, out_dir)
    try:
        for key, rows in tables.items():
            logger.table(key, rows)
        for key, path in images.items():
            logger.log_image(key, path)
        logger.summary(summary)
    finally:
        logger.finish()


def open_logger(cfg, out_dir: Path, resume_step: int | None = None, enabled: bool = True) -> MetricLogger:
    """The configured dashboard for a run of any mode: its Hydra name, group and tags, job type = the mode; the
    run manifest (``uavgnn.runs.manifest``) goes with the config."""
    config = {
        **OmegaConf.to_container(cfg, resolve=True),
        "manifest": run_manifest(resolve_device(cfg.hardware.device)),
    }
    return MetricLogger(
        out_dir, cfg.logger, config=config, context=run_context(cfg.mode), resume_step=resume_step, enabled=enabled
    )


def read_history(out_dir: Path) -> list[dict[str, Any]]:
    """The rows of ``metrics.jsonl``; a torn last line (the process was killed mid-write) is dropped."""
    path = out_dir / HISTORY
    if not path.exists():
        return []
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    rows = []
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if isinstance(row, dict):
            rows.append(row)
        else:
            if i < len(lines) - 1 or row is not None:
                raise RunDirectoryError(
                    f"{path} is damaged: line {i + 1} is not a JSON object (only a torn last line, "
                    "from a kill while writing it, is tolerated)"
                )
            log.warning("%s: dropping a torn last line (the run was killed while writing it)", path)
    return rows


class MetricLogger:
    """Logs ``{key: value}`` at a step to ``metrics.jsonl`` and the configured dashboard.

    ``resume_step``: history lines after this step (written after the last
    checkpoint by an interrupted run) are dropped, so the history has no
    duplicated steps after a resume; ``None`` starts a new history. A history
    that cannot be written (full disk, read-only) is a ``StorageError``
    naming the file: unlike a dashboard, it is the run's record.
    ``enabled=False`` (the non-zero ranks of a data-parallel run) writes
    nothing anywhere.
    """

    def __init__(
        self,
        out_dir: Path,
        settings,
        config: dict | None = None,
        context: RunContext = RunContext(),
        resume_step: int | None = None,
        enabled: bool = True,
    ) -> None:
        """``settings``: the ``logger`` config group (name = back-end, mode, project, entity)."""
        backend = settings.name
        self.out_dir = out_dir
        # TensorBoard's hparams view takes scalars: the flattened config, lists as text (the manifest: a text tab)
        self.hparams = {
            k: v if isinstance(v, (int, float, str, bool)) else str(v)
            for k, v in flatten(config or {}).items()
            if not k.startswith(("hydra", "manifest"))
        }
        self.history_path = out_dir / HISTORY
        self.wandb_run = None
        self.tensorboard = None
        self._history = None
        self.rows = 0  # lines of metrics.jsonl: a checkpoint records it, a resume checks the history still has them
        self.enabled = enabled
        if not enabled:
            return
        self.truncate(resume_step)
        if backend == "wandb" and settings.mode != "disabled":
            self.wandb_run = self._guarded("wandb.init", lambda: self._init_wandb(settings, config, context))
        elif backend == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard = SummaryWriter(log_dir=str(out_dir / TENSORBOARD_DIR))
            if (config or {}).get("manifest"):
                text = "\n\n".join(manifest_lines(config["manifest"]))
                self._guarded("tensorboard.add_text", lambda: self.tensorboard.add_text("run/manifest", text, 0))
        elif backend not in ("wandb", "jsonl", "none"):
            raise ValueError(f"logger.name: unknown logger {backend!r} (expected wandb, tensorboard, jsonl or none)")

    def truncate(self, step: int | None) -> None:
        """Keep the history up to ``step`` (all of it dropped for ``None``) and append from there:
        used on resume and when training rolls back to its last good checkpoint. The kept rows replace the
        file atomically (written beside it, flushed to the disk, renamed over it): a kill at any moment
        leaves the old history or the new one, never a cut."""
        if not self.enabled:
            return
        if self._history is not None:
            self._history.close()
        kept = [] if step is None else [r for r in read_history(self.out_dir) if r.get("step", 0) <= step]
        atomic_write(self.history_path, "".join(json.dumps(r) + "\n" for r in kept).encode())
        self.rows = len(kept)
        try:
            self._history = self.history_path.open("a")
        except OSError as err:
            raise storage_error(self.history_path, err) from None

    def _append(self, row: dict[str, Any]) -> None:
        try:
            self._history.write(json.dumps(row) + "\n")
            self._history.flush()
        except OSError as err:
            raise storage_error(self.history_path, err) from None
        self.rows += 1

    def _init_wandb(self, settings, config, context: RunContext):
        """The wandb run; an online start that gets no answer within ``logger.init_timeout`` seconds (no
        network, a server down) falls back to an offline run, said in one line."""
        import wandb

        identity = run_id(self.out_dir)
        init = dict(
            project=settings.project,
            entity=settings.entity,
            dir=str(self.out_dir),
            id=identity,
            name=(context.name or f"{self.out_dir.name}-{identity}")[:128],
            job_type=context.job_type,
            resume="allow",
            config=config,
            group=context.group,
            tags=list(context.tags),
            reinit="finish_previous",
            settings=wandb.Settings(silent=True, console="off", init_timeout=settings.init_timeout),
        )
        mode = settings.mode
        try:
            run = wandb.init(mode=mode, **init)
        except Exception as err:  # noqa: BLE001 - wandb raises CommError, UsageError, ... for an unreachable server
            if mode != "online":
                raise
            cause = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
            echo(
                f"wandb: online start failed within {settings.init_timeout:g} s ({cause}); logging offline instead",
                err=True,
            )
            wandb.teardown()  # the failed start still holds the run id in wandb's service
            mode = "offline"
            run = wandb.init(mode=mode, **init)
        for key, summary in SUMMARIES.items():
            run.define_metric(key, summary=summary)
        if mode == "offline" and context.group is None:  # a sweep says it once for all its jobs (callbacks)
            where = (self.out_dir / WANDB_DIR).resolve()  # the hint works from any directory
            echo(f"wandb: offline run {identity} in {where}; upload: wandb sync {where}/offline-run-*")
        return run

    def _guarded(self, what: str, call):
        try:
            return call()
        except Exception as err:  # a dashboard must never stop training
            warnings.warn(
                f"logger: {what} failed ({type(err).__name__}: {err}); continuing without this dashboard",
                RuntimeWarning,
                stacklevel=3,
            )
            if what.startswith("wandb"):
                self.wandb_run = None
            else:
                self.tensorboard = None
            return None

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self._history is None:
            return
        self._append({"step": step, **metrics})
        if self.wandb_run is not None:
            self._guarded("wandb.log", lambda: self.wandb_run.log(metrics, step=step))
        if self.tensorboard is not None:

            def write():
                for key, value in metrics.items():
                    self.tensorboard.add_scalar(key, value, step)

            self._guarded("tensorboard.add_scalar", write)

    def event(self, name: str, step: int, **fields: Any) -> None:
        """A discrete event (e.g. a curriculum advance) as its own ``metrics.jsonl`` line."""
        if self._history is None:
            return
        self._append({"step": step, "event": name, **fields})

    def log_image(self, key: str, path: Path, step: int | None = None) -> None:
        if self.wandb_run is not None:
            import wandb

            self._guarded("wandb.log image", lambda: self.wandb_run.log({key: wandb.Image(str(path))}, step=step))
        if self.tensorboard is not None:
            import matplotlib.image

            self._guarded(
                "tensorboard.add_image",
                lambda: self.tensorboard.add_image(
                    key, matplotlib.image.imread(str(path))[..., :3], step, dataformats="HWC"
                ),
            )

    def table(
        self, key: str, rows: list[dict[str, Any]], step: int | None = None, columns: list[str] | None = None
    ) -> None:
        """Result rows (a method comparison, transfer rows, benchmark sections) as a wandb Table, or a
        markdown table in TensorBoard's text tab."""
        if not rows:
            return
        columns = columns or list(dict.fromkeys(k for row in rows for k in row))
        data = [[_plain(row.get(c)) for c in columns] for row in rows]
        if self.wandb_run is not None:
            import wandb

            self._guarded(
                "wandb.log table", lambda: self.wandb_run.log({key: wandb.Table(columns=columns, data=data)}, step=step)
            )
        if self.tensorboard is not None:
            text = markdown_table(columns, data)
            self._guarded("tensorboard.add_text", lambda: self.tensorboard.add_text(key, text, step))

    def summary(self, values: dict[str, Any]) -> None:
        """The final metrics: the wandb run summary; TensorBoard's hparams view (config against metrics)."""
        if self.wandb_run is not None:
            self._guarded("wandb.summary", lambda: self.wandb_run.summary.update(values))
        if self.tensorboard is not None:
            numbers = {
                k: float(v)
                for k, v in values.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            }
            self._guarded("tensorboard hparams", lambda: self._tensorboard_hparams(numbers))

    def _tensorboard_hparams(self, numbers: dict[str, float]) -> None:
        """The hparams view's records written into this run's own event file: ``add_hparams`` would write them
        into a subfolder, which TensorBoard lists as a second run."""
        from torch.utils.tensorboard.summary import hparams

        writer = self.tensorboard._get_file_writer()
        for record in hparams(self.hparams, numbers):
            writer.add_summary(record)
        for key, value in numbers.items():  # the view reads each metric from the run's scalars
            self.tensorboard.add_scalar(key, value)

    def finish(self) -> None:
        if self._history is not None:
            self._history.close()
        if self.wandb_run is not None:
            self._guarded("wandb.finish", self.wandb_run.finish)
            self.wandb_run = None
        if self.tensorboard is not None:
            self._guarded("tensorboard.close", self.tensorboard.close)
            self.tensorboard = None


def _plain(value: Any) -> Any:
    """A table cell wandb accepts: numbers and text as they are, anything else as text."""
    return value if value is None or isinstance(value, (int, float, str, bool)) else str(value)
