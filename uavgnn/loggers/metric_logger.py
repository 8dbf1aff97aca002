"""Metric logging: the run's history (``metrics.jsonl``) always, plus wandb or TensorBoard; never blocks training.

Each dashboard is called through ``_guarded``: its first failure (no network, no account, a full disk) is
reported once as a warning and that dashboard is switched off, while the history and training carry on.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from uavgnn.infrastructure.device import resolve_device
from uavgnn.loggers.context import RunContext, run_context
from uavgnn.loggers.tensorboard_dashboard import TensorBoardDashboard
from uavgnn.loggers.wandb_dashboard import WandbDashboard
from uavgnn.runs.history import History
from uavgnn.runs.manifest import run_manifest

BACKENDS = ("wandb", "tensorboard", "jsonl", "none")  # logger.name: jsonl and none keep the history only


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
        settings: Any,
        config: dict | None = None,
        context: RunContext = RunContext(),
        resume_step: int | None = None,
        enabled: bool = True,
    ) -> None:
        """``settings``: the ``logger`` config group (name = back-end, mode, project, entity)."""
        backend = settings.name
        if backend not in BACKENDS:
            raise ValueError(f"logger.name: unknown logger {backend!r} (expected {', '.join(BACKENDS)})")
        self.out_dir = out_dir
        self.history = History(out_dir)
        self.dashboards: list[WandbDashboard | TensorBoardDashboard] = []
        self.enabled = enabled
        if not enabled:
            return
        self.history.truncate(resume_step)
        if backend == "wandb" and settings.mode != "disabled":
            board = self._call("wandb.init", lambda: WandbDashboard(out_dir, settings, config, context))
            if board is not _FAILED:
                self.dashboards.append(board)
        elif backend == "tensorboard":
            board = TensorBoardDashboard(out_dir, config, context.overrides)
            self.dashboards.append(board)
            self._guarded(board, "add_text", board.write_manifest)

    @property
    def rows(self) -> int:
        """Lines of ``metrics.jsonl``: a checkpoint records it, a resume checks the history still has them."""
        return self.history.rows

    def truncate(self, step: int | None) -> None:
        """Keep the history up to ``step`` (all of it dropped for ``None``) and append from there: on resume and
        when training rolls back to its last good checkpoint."""
        if self.enabled:
            self.history.truncate(step)

    def _guarded(self, board: Any, operation: str, call: Callable[[], Any]) -> None:
        if self._call(f"{board.name}.{operation}", call) is _FAILED:
            self.dashboards.remove(board)

    @staticmethod
    def _call(what: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as err:  # a dashboard must never stop training
            warnings.warn(
                f"logger: {what} failed ({type(err).__name__}: {err}); continuing without this dashboard",
                RuntimeWarning,
                stacklevel=4,
            )
            return _FAILED

    def log(self, metrics: dict[str, float], step: int) -> None:
        if not self.history.is_open:
            return
        self.history.append({"step": step, **metrics})
        for board in list(self.dashboards):
            self._guarded(board, "log", lambda: board.log(metrics, step))

    def event(self, name: str, step: int, **fields: Any) -> None:
        """A discrete event (e.g. a curriculum advance) as its own ``metrics.jsonl`` line."""
        if self.history.is_open:
            self.history.append({"step": step, "event": name, **fields})

    def log_image(self, key: str, path: Path, step: int | None = None) -> None:
        for board in list(self.dashboards):
            self._guarded(board, "log_image", lambda: board.log_image(key, path, step))

    def table(
        self, key: str, rows: list[dict[str, Any]], step: int | None = None, columns: list[str] | None = None
    ) -> None:
        """Result rows (a method comparison, transfer rows, benchmark sections) as a wandb Table, or a
        markdown table in TensorBoard's text tab."""
        if not rows:
            return
        columns = columns or list(dict.fromkeys(k for row in rows for k in row))
        data = [[_plain(row.get(c)) for c in columns] for row in rows]
        for board in list(self.dashboards):
            self._guarded(board, "table", lambda: board.table(key, columns, data, step))

    def summary(self, values: dict[str, Any]) -> None:
        """The final metrics: the wandb run summary; TensorBoard's hparams view (config against metrics)."""
        for board in list(self.dashboards):
            self._guarded(board, "summary", lambda: board.summary(values))

    def finish(self) -> None:
        self.history.close()
        for board in list(self.dashboards):
            self._guarded(board, "finish", board.finish)
        self.dashboards.clear()


_FAILED = object()  # what a guarded call that failed returns


def _plain(value: Any) -> Any:
    """A table cell wandb accepts: numbers and text as they are, anything else as text."""
    return value if value is None or isinstance(value, (int, float, str, bool)) else str(value)


def open_logger(cfg: Any, out_dir: Path, resume_step: int | None = None, enabled: bool = True) -> MetricLogger:
    """The configured dashboard for a run of any mode: its Hydra name, group and tags, job type = the mode; the
    run manifest (``uavgnn.runs.manifest``) goes with the config."""
    config = {
        **OmegaConf.to_container(cfg, resolve=True),
        "manifest": run_manifest(resolve_device(cfg.hardware.device)),
    }
    return MetricLogger(
        out_dir, cfg.logger, config=config, context=run_context(cfg.mode), resume_step=resume_step, enabled=enabled
    )


def publish(
    cfg: Any, out_dir: Path, tables: dict[str, list[dict[str, Any]]], images: dict[str, Path], summary: dict[str, Any]
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
