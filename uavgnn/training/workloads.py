"""What the shared loop trains on: labelled scene graphs, or experience from the UAV environment.

The ``Trainer`` owns the optimisation; a workload owns the data side of it:
where each step's batch comes from (a pure function of (seed, step) and its
own saved state, so resume and rollback stay exact), how many items a batch
holds, the candidate budget k of a step, and how the policy is validated -
with the metric best.pt minimises (``score_key``).

- ``SceneWorkload`` (imitation, reinforce): cached splits per curriculum
  stage in ``BatchSource`` order, or scenes generated on the device every step
  (``data.source=generated``, ``FreshScenes``); jittered k, greedy-decoded
  validation against the MILP labels of the cached validation split
  (``val/optimality_gap``).
- ``uavgnn.envs.experience.Experience`` (masac): environments stepped by the
  current policy, a replay buffer, episodes scored against the scripted
  planner (``val/planner_gap``).
- ``uavgnn.envs.on_policy.EpisodeWorkload`` (coma): on-policy episodes from parallel environments, several
  passes of minibatches per collection, validated against the scripted planner.
- ``uavgnn.dynamics.workload.TrajectoryWorkload`` (dynamics): windows of cached rollouts, scored by the
  k-step prediction error (``val/k_step_rmse``).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import torch
from torch import nn
from torch_geometric.data import Batch

from uavgnn import distributed
from uavgnn.data.splits import load_split
from uavgnn.dynamics.workload import TrajectoryWorkload
from uavgnn.envs.experience import Experience
from uavgnn.envs.on_policy import EpisodeWorkload
from uavgnn.evaluation.scoring import evaluate_model
from uavgnn.problem.graphs import GraphSettings
from uavgnn.problem.metrics import mean_metrics
from uavgnn.training.batches import BatchSource
from uavgnn.training.fresh_scenes import FreshScenes
from uavgnn.training.schedule import jittered_k


class SceneWorkload:
    """Labelled scene graphs: one training and one validation split per curriculum stage."""

    score_key, unit = "val/optimality_gap", "graphs"

    def __init__(self, cfg, device: torch.device) -> None:
        self.cfg, self.device = cfg, device
        self.graph = GraphSettings.from_config(cfg.data)
        self.sizes = list(cfg.curriculum.stages) if cfg.curriculum.name != "none" else [cfg.data.n_uav]
        generated = cfg.data.source == "generated"
        with distributed.main_rank_first():  # one split per curriculum stage (just data.n_uav without one)
            self.stage_train = [] if generated else [load_split(cfg, "train", n_uav=n) for n in self.sizes]
            self.stage_val = [load_split(cfg, "val", n_uav=n) for n in self.sizes]
        self.batches = (FreshScenes(cfg, self.sizes, device) if generated
                        else BatchSource(cfg, self.sizes, self.stage_train, device))

    def probe_store(self):
        """Items ``hardware.batch_size=auto`` measures trial steps on (``gather(ids)``, ``len``)."""
        return self.batches if isinstance(self.batches, FreshScenes) else self.stage_train[-1]

    def k(self, stage: int) -> int:
        return self.graph.k(self.sizes[stage])

    def step_k(self, step: int, stage: int) -> int:
        return jittered_k(self.k(stage), self.cfg.data.k_jitter, self.cfg.seed, step, self.cfg.data.k_max)

    def restart(self, step: int, batch_size: int) -> None:
        self.batches.restart(step, batch_size)

    def next(self, step: int, stage: int, batch_size: int) -> Batch:
        return self.batches.next(step, stage, batch_size)

    def items(self, batch: Batch) -> int:
        return batch.num_graphs

    def feedback(self, batch: Batch, values: torch.Tensor | None) -> None:
        """Per-item values the algorithm returned; scene batches need none."""

    def window_stats(self) -> dict[str, float]:
        return {}

    def validate(self, policy: nn.Module, stage: int, dtype: torch.dtype | None) -> dict[str, float]:
        result = evaluate_model(policy, self.stage_val[stage], self.cfg.train.decoder, self.k(stage), self.device,
                                amp_dtype=dtype)
        return {f"val/{key}": value for key, value in mean_metrics(result.metrics).items()}

    def describe(self, val: dict[str, float], stage: int, best: float) -> str:
        return (f"val ({self.sizes[stage]} UAVs) optimality_gap {val['val/optimality_gap']:.4f} (best {best:.4f}), "
                f"completion_score {val['val/completion_score']:.3f}")

    def checkpoint_extras(self) -> dict[str, Any]:
        return {"graph": asdict(self.graph)}

    def state_dict(self) -> dict[str, Any]:
        return {}  # batches are a pure function of (seed, step)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore (see ``state_dict``)."""


def make_workload(cfg, model: nn.Module, algorithm, device: torch.device):
    """The workload of ``cfg.algorithm``: replayed experience for masac, on-policy episodes for coma,
    trajectory windows for dynamics, labelled scenes otherwise."""
    if cfg.algorithm.name == "masac":
        return Experience(cfg, model, device)
    if cfg.algorithm.name == "coma":
        return EpisodeWorkload(cfg, model, device)
    if cfg.algorithm.name == "dynamics":
        return TrajectoryWorkload(cfg, algorithm, device)
    return SceneWorkload(cfg, device)
