"""A trained assignment policy applied to one scene of any size: decoded directly (``scene``) or guiding the
MILP (``guided``). Above the solvers and the models: it uses both."""
