"""The dashboards a run logs to (the ``logger`` group): the ``MetricLogger`` that writes the run's history and
fans out to wandb or TensorBoard, each back-end in its own module, and how a run is named there (``context``).
A failing dashboard is switched off with one warning; the history and training carry on."""

from uavgnn.loggers.metric_logger import MetricLogger, open_logger, publish

__all__ = ["MetricLogger", "open_logger", "publish"]
