"""Reward and metrics of assignments (DESIGN §1): the one implementation everyone uses.

An assignment is an int array of length N: the target index of each UAV, or
-1 for idle. Metrics are computed for many scenes at once by flattening all
UAVs and targets into one array and counting with ``np.bincount``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from uavgnn.problem.scenes import Scene

IDLE = -1
GAP_EPS = 1e-9


def assignment_metrics(
    scenes: Sequence[Scene], assignments: Sequence[np.ndarray], optimum: Sequence[float] | np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Every DESIGN §1 metric per scene, shape (S,) each.

    ``optimum`` holds J* per scene (the exact solver's objective); without it
    ``optimality_gap`` is left out.
    """
    if len(scenes) != len(assignments):
        raise ValueError(f"assignment_metrics: {len(scenes)} scenes but {len(assignments)} assignments")
    n_scenes = len(scenes)
    n_uav = np.array([s.n_uav for s in scenes])
    n_target = np.array([s.n_target for s in scenes])
    for s, (scene, a) in enumerate(zip(scenes, assignments)):
        a = np.asarray(a)
        if a.shape != (scene.n_uav,):
            raise ValueError(f"assignment of scene {s}: shape {a.shape}, expected ({scene.n_uav},)")
        if a.size and (a.min() < IDLE or a.max() >= scene.n_target):
            raise ValueError(f"assignment of scene {s}: target index out of [-1, {scene.n_target - 1}]")
    target_offset = np.concatenate([[0], np.cumsum(n_target)[:-1]])
    uav_scene = np.repeat(np.arange(n_scenes), n_uav)
    target_scene = np.repeat(np.arange(n_scenes), n_target)

    a = np.concatenate([np.asarray(x, dtype=np.int64) for x in assignments])
    uav_pos = np.concatenate([s.uav_pos for s in scenes])
    uav_range = np.concatenate([s.uav_range for s in scenes])
    target_pos = np.concatenate([s.target_pos for s in scenes])
    need = np.concatenate([s.need for s in scenes])
    value = np.concatenate([s.value for s in scenes])
    lam = np.array([s.lam for s in scenes])

    busy = a != IDLE
    busy_target = target_offset[uav_scene[busy]] + a[busy]  # global target index of each busy UAV
    travel = np.linalg.norm(uav_pos[busy] - target_pos[busy_target], axis=1)
    count = np.bincount(busy_target, minlength=len(need))
    completed = count >= need

    n_busy = np.bincount(uav_scene[busy], minlength=n_scenes)
    distance = np.bincount(uav_scene[busy], weights=travel, minlength=n_scenes)
    n_completed = np.bincount(target_scene, weights=completed, minlength=n_scenes)
    completed_value = np.bincount(target_scene, weights=value * completed, minlength=n_scenes)
    excess = np.bincount(target_scene, weights=np.maximum(0, count - need), minlength=n_scenes)
    infeasible = np.bincount(uav_scene[busy], weights=travel > uav_range[busy], minlength=n_scenes)

    reward = completed_value - lam * distance
    completion_rate = n_completed / n_target
    congestion = np.divide(excess, n_busy, out=np.zeros(n_scenes), where=n_busy > 0)
    out = {
        "reward": reward,
        "per_agent_reward": reward / n_uav,
        "completion_rate": completion_rate,
        "congestion": congestion,
        "completion_score": completion_rate * (1.0 - congestion),
        "efficiency": np.divide(n_completed, distance, out=np.zeros(n_scenes), where=distance > 0),
        "infeasible": infeasible.astype(np.int64),
    }
    if optimum is not None:
        optimum = np.asarray(optimum, dtype=np.float64)
        out["optimality_gap"] = (optimum - reward) / np.maximum(np.abs(optimum), GAP_EPS)
    return out


def reward(scene: Scene, assignment: np.ndarray) -> float:
    """J(a) of one scene."""
    return float(assignment_metrics([scene], [assignment])["reward"][0])


def mean_metrics(metrics: dict[str, np.ndarray]) -> dict[str, float]:
    """Mean over scenes of each metric, for logging."""
    return {k: float(np.mean(v)) for k, v in metrics.items()}
