"""The wandb back-end: one wandb run per run directory (offline by default), continued by a resumed run."""

from __future__ import annotations

import secrets
import string
from pathlib import Path
from typing import Any

from uavgnn.infrastructure.console import echo
from uavgnn.infrastructure.storage import atomic_write
from uavgnn.loggers.context import RunContext
from uavgnn.runs.layout import WANDB_DIR, WANDB_RUN_ID

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


def run_id(out_dir: Path) -> str:
    """This run directory's wandb id: random on the first start, then read back, so a resumed run continues
    its wandb run whatever the folders around it are called."""
    path = out_dir / WANDB_RUN_ID
    if path.exists():
        return path.read_text().strip()
    new = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))  # wandb's id form
    atomic_write(path, new.encode())
    return new


class WandbDashboard:
    """A wandb run; an online start that gets no answer within ``logger.init_timeout`` seconds (no network, a
    server down) falls back to an offline run, said in one line."""

    name = "wandb"

    def __init__(self, out_dir: Path, settings: Any, config: dict | None, context: RunContext) -> None:
        import wandb

        identity = run_id(out_dir)
        init = dict(
            project=settings.project,
            entity=settings.entity,
            dir=str(out_dir),
            id=identity,
            name=(context.name or f"{out_dir.name}-{identity}")[:128],
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
            where = (out_dir / WANDB_DIR).resolve()  # the hint works from any directory
            echo(f"wandb: offline run {identity} in {where}; upload: wandb sync {where}/offline-run-*")
        self.run = run

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def log_image(self, key: str, path: Path, step: int | None) -> None:
        import wandb

        self.run.log({key: wandb.Image(str(path))}, step=step)

    def table(self, key: str, columns: list[str], data: list[list[Any]], step: int | None) -> None:
        import wandb

        self.run.log({key: wandb.Table(columns=columns, data=data)}, step=step)

    def summary(self, values: dict[str, Any]) -> None:
        self.run.summary.update(values)

    def finish(self) -> None:
        self.run.finish()
