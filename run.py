"""``python run.py ...`` from a checkout: the same as the ``uavgnn`` console script (``uavgnn/program/cli.py``)."""

from uavgnn.program.cli import main

if __name__ == "__main__":
    main()
