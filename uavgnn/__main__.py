"""``python -m uavgnn ...``: the same as the ``uavgnn`` console script."""

from uavgnn.program.cli import main

main()
