"""The method table of one test split: the model's decision beside the controls a reviewer asks for, on the same
scenes, each timed the same way (DESIGN §4.9): the MILP pruned by the model and by rules without one
(``solvers.pruned``: nearest, value, relaxation; the same candidates, the same ``keep``, the relaxation's pair in
each), the full MILP stopped at a few time budgets (its incumbent), greedy, lap, min-cost flow, min-cost flow with
partial targets repaired by a rule (the pipeline of a model that reads the relaxation, a rule in its place), and
the MILP."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from uavgnn.data.store import GraphStore
from uavgnn.evaluation.assignments import Evaluation, evaluate_model
from uavgnn.inference.guided import solve_guided
from uavgnn.inference.scene import scene_graph
from uavgnn.infrastructure.console import count
from uavgnn.infrastructure.device import unwrap
from uavgnn.models.choices import Balancing
from uavgnn.models.policy import balancing_of, deciding_with
from uavgnn.problem.graphs import GraphSettings
from uavgnn.problem.metrics import assignment_metrics, mean_metrics, reward
from uavgnn.problem.scenes import Scene
from uavgnn.reporting.intervals import ci95
from uavgnn.solvers import ProblemTooLarge, SolveResult, solve, solve_mcf, solve_milp
from uavgnn.solvers.bound import scene_bound
from uavgnn.solvers.pruned import solve_with_pruner

TABLE_KEYS = ("reward", "completion_score", "efficiency", "optimality_gap", "infeasible")
# the figures a method table shows of each method (before a table's own columns), and what its interval is
SHOWN = ("method", "reward", "completion_score", "efficiency", "optimality_gap", "gap_ci95")
INTERVAL_NOTE = "gap_ci95: half-width of the 95% interval of the mean gap over the test scenes"


@dataclass(frozen=True)
class Controls:
    """What the table scores beside the model's own decision (``eval.keeps``, ``eval.pruners``, ...): a pruned
    MILP per pruner and ``keep``, the full MILP at each budget, a sampled row with ``best_of`` > 1."""

    keeps: tuple[int, ...] = ()  # each UAV's candidates a pruned MILP keeps (and the relaxation's pair); () none
    pruners: tuple[str, ...] = ("model",)  # model, and the rules of ``solvers.pruned.PRUNERS``
    milp_budgets: tuple[float, ...] = ()  # seconds: the full MILP stopped there, its incumbent
    time_limit: float = 60.0  # a pruned MILP's time limit
    best_of: int = 0  # the best, by the true reward, of this many decodes of the perturbed policy


@dataclass
class Scored:
    """One method's assignments of the split's scenes, its time per scene and what its row says besides."""

    method: str
    assignments: list[np.ndarray]
    time_s: float
    extra: dict


def compare_on_split(
    model: nn.Module,
    store: GraphStore,
    decoder: str,
    graph: GraphSettings,
    k: int,
    device: torch.device,
    amp_dtype: torch.dtype | None = None,
    samples: int = 16,
    repair: bool = False,
    controls: Controls = Controls(),
) -> tuple[list[dict], Evaluation]:
    """One row per method: mean metrics over the split's scenes and time per scene (s). ``graph``: the model's
    graph settings. A refining model (``refine_rounds`` > 0) also gets an ``unrefined`` row: its first round alone;
    a balancing one (``model.capacity_iters`` > 0) an ``unbalanced`` row: its plain policy decoded; one deciding in
    stages (``model.commit_stages`` > 1) a ``single-stage`` row: its balanced policy decoded at once.

    The model's time is graph build (the relaxation's included when it reads it) + forward + decode; a pruned
    MILP's, its pruner's scoring + the relaxation + HiGHS; the MILP's, the label solve. Gaps are against the
    MILP's optimum where it proved one, on the other scenes against the best assignment any method found (the
    MILP's incumbent included; ``reference`` says on how many of each): the time-limited MILP's objective is
    just another heuristic's, so there the gaps rank the methods and bound nothing. Where an optimum is missing,
    ``bound_gap`` is each method's gap to a certified bound instead (``uavgnn.solvers.bound``; the optimum where
    proven): how far from the optimum it is at most; the MILP's row names the bound and its time.
    """
    scenes = store.scenes()
    start = time.perf_counter()
    for scene in scenes:  # the graphs as the model would be given them, timed (the split's are cached)
        scene_graph(model, scene, graph)
    build_s = (time.perf_counter() - start) / len(scenes)
    result = evaluate_model(model, store, decoder, k, device, amp_dtype=amp_dtype, samples=samples, repair=repair)
    rounds = getattr(unwrap(model), "refine_rounds", 0)
    refined = f", {count(rounds, 'refinement round')}" if rounds else ""
    scored = [_decoded(f"model ({decoder}{' + repair' if repair else ''}{refined})", result, build_s, len(scenes))]
    if rounds:
        plain = evaluate_model(
            model, store, decoder, k, device, amp_dtype=amp_dtype, samples=samples, repair=repair, rounds=0
        )
        scored.append(_decoded(f"unrefined ({decoder})", plain, build_s, len(scenes)))
    deciding = balancing_of(model)
    others = ([("unbalanced", Balancing())] if deciding.iters else []) + (
        [("single-stage", replace(deciding, stages=0))] if deciding.stages > 1 else []
    )
    for name, balancing in others:
        with deciding_with(model, balancing):
            plain = evaluate_model(
                model, store, decoder, k, device, amp_dtype=amp_dtype, samples=samples, repair=repair
            )
        scored.append(_decoded(f"{name} ({decoder})", plain, build_s, len(scenes)))
    if controls.best_of > 1 and decoder != "sample":
        sampled = evaluate_model(model, store, "sample", k, device, amp_dtype=amp_dtype, samples=controls.best_of)
        scored.append(_decoded(f"sampled (best of {controls.best_of})", sampled, build_s, len(scenes)))
    for keep in controls.keeps:
        for pruner in controls.pruners:
            if pruner == "model":
                solver = lambda s: solve_guided(model, s, graph, keep, controls.time_limit, device, amp_dtype)  # noqa: E731
            else:
                solver = lambda s: solve_with_pruner(s, pruner, keep, controls.time_limit, graph.k_max)  # noqa: E731
            scored.append(_pruned(f"{pruner}-pruned milp (keep {keep})", scenes, solver))
    for budget in controls.milp_budgets:
        scored.append(_solved(f"milp ({budget:g} s)", scenes, lambda s: solve_milp(s, time_limit=budget)))
    for name in ("greedy", "lap", "mcf"):
        try:
            scored.append(_solved(name, scenes, lambda s: solve(s, name)))
        except ProblemTooLarge as err:
            scored.append(Scored(name, [], float("nan"), {"note": str(err).split(";")[0]}))
    scored.append(_solved("mcf + repair", scenes, lambda s: solve_mcf(s, repair=True)))  # a rule for the model
    scored.append(
        Scored(
            "milp",
            store.label_assignments(),
            float(store.solve_time.mean()),
            {"note": "status " + ",".join(sorted(set(store.status)))},
        )
    )
    reference, proven = _reference(store, scenes, scored)
    bounds, bound_note = _bounds(scenes, proven, reference, graph.k_max)
    rows = [
        {
            "method": s.method,
            **(_means(assignment_metrics(scenes, s.assignments, reference)) if s.assignments else {}),
            "time_s": s.time_s,
            "note": "",
            **s.extra,
            "reference_optimal": f"{int(proven.sum())}/{len(scenes)}",
            **(
                {"bound_gap": _bound_gap(scenes, s.assignments, bounds)} if s.assignments and bounds is not None else {}
            ),
        }
        for s in scored
    ]
    if bound_note:
        rows[-1]["note"] = f"{rows[-1]['note']}; {bound_note}".lstrip("; ")
    rows[0]["note"] = (
        f"build {build_s * 1e3:.2f} ms + forward {result.forward_s / len(scenes) * 1e3:.2f} ms + "
        f"decode {result.decode_s / len(scenes) * 1e3:.2f} ms per scene"
    )
    return rows, replace(result, metrics=assignment_metrics(scenes, result.assignments, reference))


def _decoded(method: str, result: Evaluation, build_s: float, n: int) -> Scored:
    """A decoded policy's entry: its time per scene split into graph build, forward and decode."""
    times = {"build_s": build_s, "forward_s": result.forward_s / n, "decode_s": result.decode_s / n}
    return Scored(method, result.assignments, sum(times.values()), times)


def _solved(method: str, scenes: list[Scene], solver: Callable[[Scene], SolveResult]) -> Scored:
    """A solver's entry, scene by scene; a status other than ``feasible`` is noted (``optimal``, ``time_limit``...)."""
    results = [solver(scene) for scene in scenes]
    statuses = sorted({r.status for r in results} - {"feasible"})
    return Scored(
        method,
        [r.assignment for r in results],
        float(np.mean([r.wall_time for r in results])),
        {"note": "status " + ",".join(statuses)} if statuses else {},
    )


def _pruned(
    method: str, scenes: list[Scene], solver: Callable[[Scene], tuple[SolveResult, dict[str, float]]]
) -> Scored:
    """A pruned MILP's entry: its time split too, the pruner's scoring (the model's, or the rule's with the
    relaxation) apart from HiGHS's (``score_s``, ``milp_s``, means per scene)."""
    timings: list[dict[str, float]] = []

    def solved(scene: Scene) -> SolveResult:
        result, timing = solver(scene)
        timings.append(timing)
        return result

    entry = _solved(method, scenes, solved)
    milp_s = float(np.mean([t["milp_s"] for t in timings]))
    entry.extra.update(score_s=entry.time_s - milp_s, milp_s=milp_s)
    return entry


def _reference(store: GraphStore, scenes: list[Scene], scored: list[Scored]) -> tuple[np.ndarray, np.ndarray]:
    """Each scene's reference objective - the MILP's proven optimum, else the best any method found - and
    which scenes have a proven one."""
    proven = np.array([status == "optimal" for status in store.status])
    best = store.objective.numpy().copy()  # the label MILP's incumbent where it stopped early
    for entry in scored:
        for i, assignment in enumerate(entry.assignments):
            if not proven[i]:
                best[i] = max(best[i], reward(scenes[i], assignment))
    return best, proven


def _bounds(scenes: list[Scene], proven: np.ndarray, optimum: np.ndarray, k: int) -> tuple[np.ndarray | None, str]:
    """Where the MILP proved no optimum, what J* is bounded by: each such scene's certified LP bound (over its UAVs'
    ``k`` nearest feasible targets, priced against every pair), the proven optimum elsewhere; and a note naming
    the bound and its time (None and no note when every optimum is proven)."""
    if proven.all():
        return None, ""
    bounds, seconds, certified = optimum.copy(), [], 0
    for i in np.flatnonzero(~proven):
        bound = scene_bound(scenes[i], k)
        bounds[i] = bound.value
        seconds.append(bound.seconds)
        certified += bound.certified
    return bounds, (
        f"bound: certified LP on {certified}/{len(seconds)} scenes without a proven optimum, "
        f"{np.mean(seconds):.3g} s per scene"
    )


def _bound_gap(scenes: list[Scene], assignments: list[np.ndarray], bounds: np.ndarray) -> float:
    """The mean over scenes of ``(bound - J(a)) / |bound|``: how far at most each assignment is from the optimum."""
    rewards = np.array([reward(scene, assignment) for scene, assignment in zip(scenes, assignments)])
    return float(np.mean((bounds - rewards) / np.maximum(np.abs(bounds), 1e-9)))


def _means(metrics: dict[str, np.ndarray]) -> dict[str, float]:
    """The table's means over the split's scenes, and the half-width of the 95% interval of the mean gap
    (Student's t over the scenes: how far another draw of test scenes could move it)."""
    means = mean_metrics(metrics)
    out = {key: means[key] for key in TABLE_KEYS if key in means}
    gaps = np.asarray(metrics.get("optimality_gap", []), dtype=float)
    if len(gaps) > 1 and np.isfinite(gaps).all():
        out["gap_ci95"] = ci95(float(gaps.std(ddof=1)), len(gaps))
    return out
