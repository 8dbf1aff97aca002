"""The dynamics model's data side: trajectory datasets from the UAV environment (``rollouts.py``), windows
normalised once (``windows.py``) and the training workload (``workload.py``); the TCN is ``uavgnn.models.tcn``
and its loss ``uavgnn.algorithms.dynamics``."""
