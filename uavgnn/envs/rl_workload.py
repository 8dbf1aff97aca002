"""What the environment workloads (``Experience``: off-policy replay; ``EpisodeWorkload``: on-policy episodes)
share: episode statistics gathered on the device and synced once per log line (saved in ``last.pt``), and
validation against the scripted planner."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from uavgnn.envs.saved_state import check_tensors
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import Step
from uavgnn.envs.validation import PlannerValidation
from uavgnn.infrastructure.device import Loading, unwrap
from uavgnn.problem.scenes import SceneDistribution

MAX_AGENTS_LOGGED = 16  # per-agent returns get their own curves up to this many UAVs (min/max always)


@dataclass(frozen=True)
class EnvRun:
    """What every environment workload reads of a run: the environment and its scenes, the seed, the validation
    episodes and how data reaches the device."""

    settings: EnvSettings
    dist: SceneDistribution
    seed: int = 0
    val_episodes: int = 256
    loading: Loading = Loading()
    train_sizes: tuple[int, ...] = ()  # on-policy collections across swarm sizes (``EpisodeWorkload``); (): n_uav


class RLWorkload:
    """Base of the environment workloads; subclasses step ``self.env`` and call ``record`` per env step."""

    def __init__(self, run: EnvRun, model: nn.Module, device: torch.device) -> None:
        self.run, self.model, self.device = run, model, device
        self.settings, self.dist, self.seed = run.settings, run.dist, run.seed
        self.sizes = [self.settings.n_uav]
        self.env_steps = 0
        self.validation = PlannerValidation(self.settings, self.dist, run.val_episodes, device)
        self._window = self._empty_window()

    def _empty_window(self) -> dict[str, Any]:
        zero = torch.zeros((), device=self.device)
        return {
            "episodes": zero,
            "return": zero,
            "agent_return": torch.zeros(self.settings.n_uav, device=self.device),
            "completion": zero,
            "collisions": zero,
            "env_time": 0.0,
            "env_steps": 0,
            "agent_steps": 0,
            "started": None,
        }

    def record(self, step: Step, ended: torch.Tensor, live: torch.Tensor | None = None) -> None:
        """Add one env step to the log window: episodes that ``ended`` here, collisions of ``live`` envs."""
        w, ended = self._window, ended.float()
        if w["started"] is None:
            w["started"] = time.perf_counter()
        w["episodes"] = w["episodes"] + ended.sum()
        w["return"] = w["return"] + (step.episode_return * ended).sum()
        if not self.run.train_sizes:  # per UAV: of one swarm size only
            w["agent_return"] = w["agent_return"] + (step.agent_return * ended[:, None]).sum(0)
        w["completion"] = w["completion"] + (step.episode_completion * ended).sum()
        w["collisions"] = w["collisions"] + (step.collisions if live is None else step.collisions * live).sum()
        w["env_steps"] += len(ended)
        w["agent_steps"] += len(ended) * step.agent_return.shape[1]
        self.env_steps += len(ended)

    def window_state(self) -> dict[str, Any]:
        """The log window so far, for ``last.pt``: a resumed run's first row averages the whole window."""
        return {**self._window, "started": None}

    def load_window(self, saved: dict[str, Any] | None) -> None:
        """Restore ``window_state`` (checked: the same statistics, finite; none in checkpoints before it)."""
        empty = self._empty_window()
        if saved is None:
            self._window = empty
            return
        tensors = {k: v for k, v in empty.items() if isinstance(v, torch.Tensor)}
        check_tensors("log window", {k: saved.get(k) for k in tensors}, {k: v.shape for k, v in tensors.items()})
        self._window = {
            **empty,
            **{
                k: (saved[k].to(self.device) if k in tensors else saved.get(k, v))
                for k, v in empty.items()
                if k != "started"
            },
        }

    def collected(self) -> None:
        """Close a collection: its time counts as environment time."""
        w = self._window
        if w["started"] is not None:
            w["env_time"] += time.perf_counter() - w["started"]
            w["started"] = None

    def window_stats(self) -> dict[str, float]:
        """Means since the last call (one host sync per log line): episodes finished, per-agent returns, speed."""
        w, self._window = self._window, self._empty_window()
        episodes = float(w["episodes"])
        stats = {
            "train/env_steps": float(self.env_steps),
            "perf/env_steps_per_s": w["env_steps"] / max(w["env_time"], 1e-9),
            "perf/agent_steps_per_s": w["agent_steps"] / max(w["env_time"], 1e-9),
            "train/collisions_per_env_step": float(w["collisions"]) / max(w["env_steps"], 1),
        }
        if episodes > 0:
            stats.update(
                {
                    "train/episode_return": float(w["return"]) / episodes,
                    "train/completion_rate": float(w["completion"]) / episodes,
                }
            )
        if episodes > 0 and not self.run.train_sizes:  # per UAV: of one swarm size only
            agent = (w["agent_return"] / episodes).tolist()
            stats.update({"train/agent_return_min": min(agent), "train/agent_return_max": max(agent)})
            if len(agent) <= MAX_AGENTS_LOGGED:
                stats.update({f"train/agent_return/{i}": value for i, value in enumerate(agent)})
        return stats

    def validate(self, policy: nn.Module, stage: int, dtype: torch.dtype | None) -> dict[str, float]:
        return self.validation(unwrap(policy).play)

    def describe(self, val: dict[str, float], stage: int, best: float) -> str:
        return self.validation.describe(val, best)

    def checkpoint_extras(self) -> dict[str, Any]:
        return {}
