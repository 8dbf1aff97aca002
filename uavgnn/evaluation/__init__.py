"""Evaluation: a policy scored on fixed test sets beside the controls a reviewer asks for, on the same scenes and
timed the same way: an assignment policy against the solvers (``methods``, ``assignments``, ``test_sets``), an
environment policy against the scripted planners (``episodes``, ``environment``), the dynamics model against
its filters (``dynamics``). Below the plug-ins, whose test phases use it, and ``mode=eval``."""
