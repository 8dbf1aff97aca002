"""Run modes dispatched by ``run.py``, one thin function each: train, eval, solve, cache, compare, info, profile,
benchmark, rollouts."""
