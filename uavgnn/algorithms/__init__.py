"""The algorithms: one plug-in each (``Algorithm`` subclasses, ``base.py`` says what a plug-in declares), what
the assignment and the environment policies share (``scene_policy``, ``env_policy``, ``on_policy``), the RL maths
they share (``rl_math``) and the registry that finds them, this package's and installed plug-ins' alike
(``registry``), with what it answers about their configs and runs (``checkpoint_config``, ``run_config``,
``compared``). To add one: docs/adding-an-algorithm.md."""
