"""What ``mode=compare`` shows of a kind of run: the assignment policies' final metrics and curves, or the
environment policies' (MASAC, COMA): their planner gap, share of the planner's return, return, completion."""

from __future__ import annotations

import math
from dataclasses import dataclass

from uavgnn.run_record import Run


@dataclass(frozen=True)
class Metrics:
    """What a comparison shows of a kind of run: its final metrics (True: higher is better), those drawn as
    bars, and the history keys drawn over the steps (the learning curve, the throughput) with their labels."""

    final: dict[str, bool]
    panels: tuple[str, ...]
    curve: tuple[str, str]
    speed: tuple[str, str]


ASSIGNMENT = Metrics({"best_val_optimality_gap": False, "test/optimality_gap": False, "test/reward": True,
                      "test/completion_score": True, "graphs_per_s": True, "peak_mem_mb": False},
                     ("best_val_optimality_gap", "test/optimality_gap", "test/completion_score", "test/reward"),
                     ("val/optimality_gap", "val optimality gap"), ("perf/graphs_per_s", "graphs/s"))
ENVIRONMENT = Metrics({"best_val_planner_gap": False, "test/of_planner": True, "test/return": True,
                       "test/completion_rate": True, "test/collisions": False, "env_steps_per_s": True,
                       "peak_mem_mb": False},
                      ("best_val_planner_gap", "test/of_planner", "test/return", "test/completion_rate"),
                      ("val/return", "val return"), ("perf/env_steps_per_s", "env steps/s"))


def metrics_of(runs: list[Run]) -> Metrics:
    """The environment policies' metrics for runs of MASAC, COMA... (a planner gap, no optimality gap), else the
    assignment policies'."""
    def has(run: Run, key: str) -> bool:
        return not math.isnan(run.metrics.get(key, math.nan))
    environment = any(has(r, "best_val_planner_gap") for r in runs)
    return ENVIRONMENT if environment and not any(has(r, "best_val_optimality_gap") for r in runs) else ASSIGNMENT
