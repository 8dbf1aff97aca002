"""Model-guided exact solving (``solver=guided``): the model prunes, HiGHS solves what is left to optimality.

The trained policy ranks each UAV's candidates; the reduced MILP keeps each UAV's ``keep`` most likely targets
(idling is always allowed) and, as a trust region, the pair the min-cost-flow relaxation (``mcf``) gives it
(``solvers.pruned.solve_pruned``, which the controls without a model - nearest, value, relaxation - share).
With the relaxation's pairs in, the reduced problem contains ``mcf``'s assignment, so ``guided`` is never worse
than ``mcf``; pruning on the model alone lost part of the optimum at scale and made HiGHS slower, not faster
(BENCHMARKS.md). The optimum is exact *on the reduced problem*: when the full optimum uses only kept pairs
it is the full optimum; otherwise the gap is what pruning cost.
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from uavgnn.inference.scene import score_scene
from uavgnn.models import TransformerGNN
from uavgnn.problem.graphs import GraphSettings
from uavgnn.problem.scenes import Scene
from uavgnn.solvers.pruned import solve_pruned
from uavgnn.solvers.result import SolveResult


def solve_guided(
    model: TransformerGNN,
    scene: Scene,
    graph: GraphSettings,
    keep: int = 2,
    time_limit: float = 60.0,
    device: torch.device | str = "cpu",
    amp_dtype: torch.dtype | None = None,
) -> tuple[SolveResult, dict[str, float]]:
    """The MILP restricted to each UAV's ``keep`` most likely targets and the relaxation's pair;
    timing {model_s, relaxation_s, milp_s, pairs}."""
    start = time.perf_counter()
    scores = score_scene(model, scene, graph, device, amp_dtype)
    uav, target, logp = scores.candidates()
    scored = time.perf_counter()
    result, timing = solve_pruned(
        scene, uav, target, logp, keep, time_limit, graph.k_max, "guided", scores.relaxed()
    )  # the relaxation the model read, when it reads one
    return replace(result, wall_time=time.perf_counter() - start), {"model_s": scored - start, **timing}
