"""The program: the command line (``cli``), one Hydra job from the composed config to its mode (``job``), the
same from Python (``from_python``), Hydra's callbacks around runs and sweeps (``callbacks``), the one-line
errors of composing a config (``composition``) and the notes on presets (``presets``)."""
