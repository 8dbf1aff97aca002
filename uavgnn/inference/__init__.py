"""A trained assignment policy applied to scenes: the decoders (``decoders``: scores -> feasible assignments, the
staged decision), one scene of any size decided directly (``scene``; a huge one in spatial tiles: ``tiles``),
refined in rounds (``refinement``) or guiding the MILP (``guided``). Above the solvers and the models: it uses
both."""
