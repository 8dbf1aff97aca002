"""Model vs model-guided MILP vs greedy vs lap vs min-cost flow vs MILP on one test split: the summary table."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import torch
from torch import nn

from uavgnn.data.store import GraphStore
from uavgnn.inference.guided import solve_guided
from uavgnn.models.choices import Balancing
from uavgnn.models.policy import balancing_of, deciding_with
from uavgnn.problem.graphs import GraphSettings, build_graph
from uavgnn.problem.metrics import assignment_metrics, mean_metrics
from uavgnn.report import ci95, count
from uavgnn.runtime import unwrap
from uavgnn.scoring.policy import Evaluation, evaluate_model
from uavgnn.solvers import ProblemTooLarge, solve

TABLE_KEYS = ("reward", "completion_score", "efficiency", "optimality_gap", "infeasible")


def compare_on_split(model: nn.Module, store: GraphStore, decoder: str, graph: GraphSettings, k: int,
                     device: torch.device, amp_dtype: torch.dtype | None = None, samples: int = 16,
                     repair: bool = False, guided_keep: int = 0, time_limit: float = 60.0, best_of: int = 0
                     ) -> tuple[list[dict], Evaluation]:
    """One row per method: mean metrics over the split's scenes and time per scene (s). ``graph``: the
    model's graph settings; ``guided_keep`` > 0 adds the model-guided MILP (``solve_guided``, each UAV's
    ``guided_keep`` most likely targets, ``time_limit`` seconds); ``best_of`` > 1 adds the best, by the true
    reward, of that many decodes of the perturbed policy (the ``sample`` decoder's; not when it is ``decoder``).
    A refining model (``refine_rounds`` > 0) also gets an ``unrefined`` row: its first round alone, what the
    rounds buy; a balancing one (``model.capacity_iters`` > 0) an ``unbalanced`` row: its plain policy decoded;
    one deciding in stages (``model.commit_stages`` > 1) a ``single-stage`` row: its balanced policy decoded at once.

    The model's time is graph build + forward + decode; the MILP's is the
    label solve. Gaps are measured against the MILP only where it proved
    optimality: a time-limited MILP's objective is just another heuristic's,
    so a split with any unproven scene gets no gap (NaN) rather than a
    meaningless one, and every row says on how many scenes the reference is proven.
    """
    scenes = store.scenes()
    proven = np.array([status == "optimal" for status in store.status])
    optimum = np.where(proven, store.objective.numpy(), np.nan)
    start = time.perf_counter()
    for scene in scenes:
        build_graph(scene, graph.k_max, graph.uav_neighbours)
    build_s = time.perf_counter() - start
    result = evaluate_model(model, store, decoder, k, device, amp_dtype=amp_dtype, samples=samples, repair=repair,
                            reference=optimum)
    n, rounds = len(scenes), getattr(unwrap(model), "refine_rounds", 0)
    refined = f", {count(rounds, 'refinement round')}" if rounds else ""
    rows = [{"method": f"model ({decoder}{' + repair' if repair else ''}{refined})", **_model_row(result, build_s, n)}]
    if rounds:
        plain = evaluate_model(model, store, decoder, k, device, amp_dtype=amp_dtype, samples=samples, repair=repair,
                               reference=optimum, rounds=0)
        rows.append({"method": f"unrefined ({decoder})", **_model_row(plain, build_s, n)})
    deciding = balancing_of(model)
    others = ([("unbalanced", Balancing())] if deciding.iters else []) + (
        [("single-stage", replace(deciding, stages=0))] if deciding.stages > 1 else [])
    for name, balancing in others:
        with deciding_with(model, balancing):
            plain = evaluate_model(model, store, decoder, k, device, amp_dtype=amp_dtype, samples=samples,
                                   repair=repair, reference=optimum)
        rows.append({"method": f"{name} ({decoder})", **_model_row(plain, build_s, n)})
    if best_of > 1 and decoder != "sample":
        sampled = evaluate_model(model, store, "sample", k, device, amp_dtype=amp_dtype, samples=best_of,
                                 reference=optimum)
        rows.append({"method": f"sampled (best of {best_of})", **_model_row(sampled, build_s, n)})
    if guided_keep > 0:
        guided = [solve_guided(model, s, graph, guided_keep, time_limit, device, amp_dtype)[0] for s in scenes]
        metrics = assignment_metrics(scenes, [r.assignment for r in guided], optimum)
        rows.append({"method": f"guided (keep {guided_keep})", **_means(metrics),
                     "time_s": float(np.mean([r.wall_time for r in guided])),
                     "note": "status " + ",".join(sorted({r.status for r in guided}))})
    for name in ("greedy", "lap", "mcf"):
        try:
            solved = [solve(s, name) for s in scenes]
        except ProblemTooLarge as err:
            rows.append({"method": name, "note": str(err).split(";")[0]})
            continue
        metrics = assignment_metrics(scenes, [r.assignment for r in solved], optimum)
        rows.append({"method": name, **_means(metrics), "time_s": float(np.mean([r.wall_time for r in solved]))})
    milp = assignment_metrics(scenes, store.label_assignments(), optimum)
    rows.append({"method": "milp", **_means(milp), "time_s": float(store.solve_time.mean()),
                 "note": "status " + ",".join(sorted(set(store.status)))})
    for row in rows:
        row.setdefault("note", "")
        row["reference_optimal"] = f"{int(proven.sum())}/{n}"
    rows[0]["note"] = (f"build {build_s / n * 1e3:.2f} ms + forward {result.forward_s / n * 1e3:.2f} ms + decode "
                      f"{result.decode_s / n * 1e3:.2f} ms per scene")
    return rows, result


def _model_row(result: Evaluation, build_s: float, n: int) -> dict[str, float]:
    """A decoded policy's row: its means, and its time per scene split into graph build, forward and decode."""
    return {**_means(result.metrics), "time_s": (build_s + result.forward_s + result.decode_s) / n,
            "build_s": build_s / n, "forward_s": result.forward_s / n, "decode_s": result.decode_s / n}


def _means(metrics: dict[str, np.ndarray]) -> dict[str, float]:
    """The table's means over the split's scenes, and the half-width of the 95% interval of the mean gap
    (Student's t over the scenes: how far another draw of test scenes could move it)."""
    means = mean_metrics(metrics)
    out = {key: means[key] for key in TABLE_KEYS if key in means}
    gaps = np.asarray(metrics.get("optimality_gap", []), dtype=float)
    if len(gaps) > 1 and np.isfinite(gaps).all():
        out["gap_ci95"] = ci95(float(gaps.std(ddof=1)), len(gaps))
    return out
