"""Metric logging: a jsonl history always, plus wandb or TensorBoard; never blocks training.

Each dashboard back-end is called through ``_guarded``: the first failure (no
network, no account, a full disk) is reported once as a warning and that
back-end is switched off, while the jsonl file and training carry on.
"""

from __future__ import annotations

import json
import logging
import re
import warnings
from pathlib import Path
from typing import Any

from uavgnn.storage import storage_error

log = logging.getLogger(__name__)
HISTORY_FILE = "metrics.jsonl"


def run_name(out_dir: Path) -> str:
    """A wandb-safe id from the run directory (``outputs/2026-11-22/12-00-00`` -> ``2026-11-22_12-00-00``);
    the same directory gives the same id, so a resumed run continues the same wandb run."""
    parts = [p for p in out_dir.resolve().parts[1:][-3:] if p not in ("outputs", "multirun")]
    return re.sub(r"[^A-Za-z0-9_.-]", "-", "_".join(parts))[-120:]


def read_history(out_dir: Path) -> list[dict[str, Any]]:
    """The rows of ``metrics.jsonl``; a torn last line (the process was killed mid-write) is dropped."""
    path = out_dir / HISTORY_FILE
    if not path.exists():
        return []
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    rows = []
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1:
                raise ValueError(f"{path}: line {i + 1} is not JSON (only a torn last line is tolerated)") from None
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

    def __init__(self, out_dir: Path, settings, config: dict | None = None, name: str | None = None,
                 group: str | None = None, tags: list[str] | None = None, resume_step: int | None = None,
                 enabled: bool = True) -> None:
        """``settings``: the ``logger`` config group (name = back-end, mode, project, entity)."""
        backend = settings.name
        self.out_dir = out_dir
        self.history_path = out_dir / HISTORY_FILE
        self.wandb_run = None
        self.tensorboard = None
        self._history = None
        self.enabled = enabled
        if not enabled:
            return
        self.truncate(resume_step)
        if backend == "wandb" and settings.mode != "disabled":
            self.wandb_run = self._guarded(
                "wandb.init", lambda: self._init_wandb(settings, config, name, group, tags))
        elif backend == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard = SummaryWriter(log_dir=str(out_dir / "tensorboard"))
        elif backend not in ("wandb", "jsonl", "none"):
            raise ValueError(f"logger.name: unknown logger {backend!r} (expected wandb, tensorboard, jsonl or none)")

    def truncate(self, step: int | None) -> None:
        """Keep the history up to ``step`` (all of it dropped for ``None``) and append from there:
        used on resume and when training rolls back to its last good checkpoint."""
        if not self.enabled:
            return
        if self._history is not None:
            self._history.close()
        kept = [] if step is None else [r for r in read_history(self.out_dir) if r.get("step", 0) <= step]
        try:
            self.history_path.write_text("".join(json.dumps(r) + "\n" for r in kept))
            self._history = self.history_path.open("a")
        except OSError as err:
            raise storage_error(self.history_path, err) from None

    def _append(self, row: dict[str, Any]) -> None:
        try:
            self._history.write(json.dumps(row) + "\n")
            self._history.flush()
        except OSError as err:
            raise storage_error(self.history_path, err) from None

    def _init_wandb(self, settings, config, name, group, tags):
        import wandb

        run_id = run_name(self.out_dir)
        return wandb.init(project=settings.project, entity=settings.entity, mode=settings.mode, dir=str(self.out_dir),
                          id=run_id,
                          name=(name or run_id)[:128],
                          resume="allow", config=config, group=group, tags=tags, reinit="finish_previous",
                          settings=wandb.Settings(quiet=True, console="off"))

    def _guarded(self, what: str, call):
        try:
            return call()
        except Exception as err:  # a dashboard must never stop training
            warnings.warn(f"logger: {what} failed ({type(err).__name__}: {err}); continuing without this dashboard",
                          RuntimeWarning, stacklevel=3)
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

    def log_image(self, key: str, path: Path, step: int) -> None:
        if self.wandb_run is not None:
            import wandb

            self._guarded("wandb.log image", lambda: self.wandb_run.log({key: wandb.Image(str(path))}, step=step))
        if self.tensorboard is not None:
            import matplotlib.image

            self._guarded("tensorboard.add_image", lambda: self.tensorboard.add_image(
                key, matplotlib.image.imread(str(path))[..., :3], step, dataformats="HWC"))

    def summary(self, values: dict[str, Any]) -> None:
        if self.wandb_run is not None:
            self._guarded("wandb.summary", lambda: self.wandb_run.summary.update(values))

    def finish(self) -> None:
        if self._history is not None:
            self._history.close()
        if self.wandb_run is not None:
            self._guarded("wandb.finish", self.wandb_run.finish)
            self.wandb_run = None
        if self.tensorboard is not None:
            self._guarded("tensorboard.close", self.tensorboard.close)
            self.tensorboard = None
