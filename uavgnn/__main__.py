"""``python -m uavgnn ...``: the same as the ``uavgnn`` console script."""

from uavgnn.cli import main

main()
