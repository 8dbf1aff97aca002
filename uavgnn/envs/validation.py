"""Validation of an environment policy: the same fixed episodes every run is scored on, against the scripted
planner (what ``best.pt`` is chosen by). Its test phase, on other episodes and beside every planner, is
``uavgnn.evaluation.episodes``."""

from __future__ import annotations

import torch

from uavgnn.envs.policies import Policy, nearest_target, run_episodes, scripted_planner
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import make_env
from uavgnn.problem.scenes import SceneDistribution

VAL_SEED = 2_000_003  # validation episodes do not depend on the run's seed: every run is scored on the same ones


class PlannerValidation:
    """Fixed validation episodes scored against the scripted planner (its score and nearest targets' computed once):
    ``val/planner_gap = (planner - policy) / |planner|`` is what best.pt minimises for the RL algorithms."""

    def __init__(self, settings: EnvSettings, dist: SceneDistribution, episodes: int, device: torch.device) -> None:
        self.env = make_env(settings, dist, episodes, device, seed=VAL_SEED, count_key="env.val_episodes")
        self.references: dict[str, float] | None = None  # the planner's and nearest targets' returns

    def _return(self, policy: Policy) -> dict[str, float]:
        self.env.generator.manual_seed(VAL_SEED)
        return run_episodes(self.env, policy).summary()

    def __call__(self, policy: Policy) -> dict[str, float]:
        if self.references is None:
            self.references = {
                "val/planner_return": self._return(scripted_planner)["return"],
                "val/nearest_return": self._return(nearest_target)["return"],
            }
        scores = self._return(policy)
        planner = self.references["val/planner_return"]
        return {
            "val/return": scores["return"],
            "val/completion_rate": scores["completion_rate"],
            "val/collisions": scores["collisions"],
            **self.references,
            "val/planner_gap": (planner - scores["return"]) / max(abs(planner), 1e-9),
        }

    @staticmethod
    def describe(val: dict[str, float], best: float) -> str:
        return (
            f"val return {val['val/return']:.3f} (scripted planner {val['val/planner_return']:.3f}, "
            f"nearest target {val['val/nearest_return']:.3f}), "
            f"planner_gap {val['val/planner_gap']:.4f} (best {best:.4f}), "
            f"completion_rate {val['val/completion_rate']:.3f}"
        )
