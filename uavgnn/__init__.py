"""uavgnn: graph-Transformer policies for multi-UAV target assignment, measured against an exact MILP."""

__version__ = "0.1.0"
