"""Run modes dispatched by ``run.py``: train, eval, solve, cache, compare."""
