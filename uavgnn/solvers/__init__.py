"""Solvers of one scene: the exact MILP and the fast baselines. ``solve`` dispatches by name."""

from __future__ import annotations

from uavgnn.infrastructure.errors import ProblemTooLarge
from uavgnn.problem.scenes import Scene
from uavgnn.solvers.greedy import solve_greedy
from uavgnn.solvers.lap import solve_lap
from uavgnn.solvers.milp import solve_milp
from uavgnn.solvers.min_cost_flow import solve_mcf
from uavgnn.solvers.result import SolveResult

BASELINES = ("milp", "greedy", "lap", "mcf")


def solve(scene: Scene, solver: str, time_limit: float = 60.0) -> SolveResult:
    """Solve ``scene`` with ``solver`` in {milp, greedy, lap, mcf} (the model-based ones need a checkpoint:
    ``uavgnn.inference.scene``, ``uavgnn.inference.guided``)."""
    if solver == "milp":
        return solve_milp(scene, time_limit=time_limit)
    if solver == "greedy":
        return solve_greedy(scene)
    if solver == "lap":
        return solve_lap(scene)
    if solver == "mcf":
        return solve_mcf(scene)
    raise ValueError(f"solver: unknown solver {solver!r} (expected one of {', '.join(BASELINES)})")


__all__ = [
    "BASELINES",
    "ProblemTooLarge",
    "SolveResult",
    "solve",
    "solve_greedy",
    "solve_lap",
    "solve_mcf",
    "solve_milp",
]
