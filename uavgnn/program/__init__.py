"""The program: the command line (``cli``), one Hydra job from the composed config to its mode (``job``), the
same from Python (``from_python``), Hydra's callbacks around runs and sweeps (``callbacks``), the one-line
errors of composing a config (``composition``) and the notes on presets (``presets``)."""

from uavgnn.runs import sweep_worker

# a launcher's worker imports the program to unpickle its job: it watches the sweep's main process from here on,
# before the imports of torch and uavgnn's modules (seconds); before that, the sweep's reaper stops it
sweep_worker.watch_sweep()
