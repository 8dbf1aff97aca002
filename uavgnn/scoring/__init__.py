"""Scoring on graph splits: a policy's decoded assignments (``policy``) and the method table against the
solvers (``methods``). Below the algorithms: their test phases and ``mode=eval`` both use it."""
