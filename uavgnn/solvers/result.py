"""What every solver returns: the assignment plus how it was obtained."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class SolveResult:
    """``objective`` is J(a) of the returned assignment; ``bound`` is an upper
    bound on J* when the solver proves one (the MILP's dual bound), else None.
    ``status`` is 'optimal' only when optimality was proven."""

    assignment: np.ndarray  # (N,) int64, target index or -1
    objective: float
    status: str  # optimal | time_limit | feasible | no_solution
    solver: str
    wall_time: float  # seconds
    bound: float | None = None
    mip_gap: float | None = None

    @property
    def is_optimal(self) -> bool:
        return self.status == "optimal"

    def to_json(self) -> dict:
        out = asdict(self)
        out["assignment"] = self.assignment.tolist()
        return out
