"""``python run.py ...`` from a checkout: the same as the ``uavgnn`` console script (``uavgnn/cli.py``)."""

from uavgnn.cli import main

if __name__ == "__main__":
    main()
