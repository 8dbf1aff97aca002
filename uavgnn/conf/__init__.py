"""The Hydra configs, a package so that ``pkg://uavgnn.conf`` finds them wherever uavgnn is installed."""
