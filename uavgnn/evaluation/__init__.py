"""Evaluation of a policy: scoring a split (``scoring``) and the method table against the baselines (``methods``)."""
