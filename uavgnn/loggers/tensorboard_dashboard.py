"""The TensorBoard back-end: scalars, images and tables (as Markdown text) in the run directory's
``tensorboard/``, and the HParams view of what the run's command line chose (its overrides that define it, not
every config key) against its final metrics, as recorded. A sweep's runs side by side, named by their
overrides, in the reports' units: ``mode=compare``'s ``comparison_tensorboard/``
(``uavgnn.loggers.tensorboard_comparison``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from uavgnn.infrastructure.nested import flatten
from uavgnn.reporting.tables import markdown_table
from uavgnn.runs.layout import TENSORBOARD_DIR
from uavgnn.runs.manifest import manifest_lines


class TensorBoardDashboard:
    name = "tensorboard"

    def __init__(self, out_dir: Path, config: dict | None, overrides: tuple[str, ...] = ()) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # the HParams view takes scalars: each override's value from the config where it names a key (a number
        # stays a number), else as typed (``model=small``: a config group's option); lists as text
        flat = flatten(config or {})
        chosen = dict(o.lstrip("+~").split("=", 1) for o in overrides if "=" in o)
        self.hparams = {
            k: (value if isinstance(value, (int, float, str, bool)) else str(value))
            for k, typed in chosen.items()
            for value in [flat.get(k, typed)]
        }
        self.writer = SummaryWriter(log_dir=str(out_dir / TENSORBOARD_DIR))
        self.manifest = "\n\n".join(manifest_lines(config["manifest"])) if (config or {}).get("manifest") else None

    def write_manifest(self) -> None:
        if self.manifest:
            self.writer.add_text("run/manifest", self.manifest, 0)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)

    def log_image(self, key: str, path: Path, step: int | None) -> None:
        import matplotlib.image

        self.writer.add_image(key, matplotlib.image.imread(str(path))[..., :3], step, dataformats="HWC")

    def table(self, key: str, columns: list[str], data: list[list[Any]], step: int | None) -> None:
        self.writer.add_text(key, markdown_table(columns, data), step)

    def summary(self, values: dict[str, Any]) -> None:
        """The hparams view's records written into this run's own event file: ``add_hparams`` would write them
        into a subfolder, which TensorBoard lists as a second run."""
        from torch.utils.tensorboard.summary import hparams

        numbers = {
            k: float(v)
            for k, v in values.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        }
        writer = self.writer._get_file_writer()
        for record in hparams(self.hparams, numbers):
            writer.add_summary(record)
        for key, value in numbers.items():  # the view reads each metric from the run's scalars
            self.writer.add_scalar(key, value)

    def finish(self) -> None:
        self.writer.close()
