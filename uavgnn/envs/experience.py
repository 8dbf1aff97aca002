"""The reinforcement-learning workload of the shared loop: environments, replay, validation episodes.

Each training step first advances every environment ``env_steps_per_update``
steps with the current policy (uniform random actions for the first
``learning_starts`` environment steps), stores the transitions, then samples
the step's batch. Acting draws from the environments' own generator and
sampling from a generator of (seed, step); both, with the environments and the
buffer, are saved in ``last.pt``, so a resumed run repeats the same steps.
Under ``torchrun`` each rank steps its own environments (seeded by rank) and
DDP averages the gradients.

Validation plays ``env.val_episodes`` fixed episodes (the same for every run
and seed) with the deterministic policy and scores them against the scripted
planner on the same episodes: ``val/planner_gap = (planner - policy) /
|planner|`` is what best.pt minimises.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from uavgnn import distributed
from uavgnn.algorithms.masac import unwrap
from uavgnn.config import env_settings, scene_distribution
from uavgnn.envs.policies import random_policy, run_episodes, scripted_planner
from uavgnn.envs.replay import ReplayBuffer, Transitions
from uavgnn.envs.uav_env import UAVEnv

MAX_AGENTS_LOGGED = 16  # per-agent returns get their own curves up to this many UAVs (min/max always)
VAL_SEED = 2_000_003  # validation episodes do not depend on the run's seed: every run is scored on the same ones


class Experience:
    """Environments stepped by the learner's policy feeding a replay buffer (``algorithm=masac``)."""

    score_key, unit = "val/planner_gap", "samples"

    def __init__(self, cfg, model: nn.Module, device: torch.device) -> None:
        self.cfg, self.model, self.device = cfg, model, device
        alg = cfg.algorithm
        self.settings, self.dist = env_settings(cfg.env), scene_distribution(cfg.task)
        rank = distributed.context().rank
        self.env = UAVEnv(self.settings, self.dist, cfg.env.n_envs, device, seed=cfg.seed * 7919 + rank)
        self.obs, self.state = self.env.reset()
        n, shapes = self.settings.n_uav, {"obs": (self.settings.n_uav, self.settings.obs_dim()),
                                          "state": (self.settings.state_dim(self.dist),)}
        shapes.update(next_obs=shapes["obs"], next_state=shapes["state"], action=(n, 2), reward=(n,), done=())
        where = cfg.hardware.data_on_device
        on_device = where == "true" or (where == "auto" and (device.type == "cpu" or self._fits(shapes, alg.buffer_size)))
        self.buffer = ReplayBuffer(alg.buffer_size, shapes, device if on_device else torch.device("cpu"),
                                   alg.prioritized, alg.priority_alpha)
        self.env_steps = 0
        self.sizes = [self.settings.n_uav]
        self._val_env = UAVEnv(self.settings, self.dist, cfg.env.val_episodes, device, seed=VAL_SEED)
        self._planner: dict[str, float] | None = None
        self._window = self._empty_window()

    def _fits(self, shapes: dict[str, tuple[int, ...]], capacity: int) -> bool:
        need = 4 * capacity * sum(torch.Size(s).numel() for s in shapes.values())
        free, _ = torch.cuda.mem_get_info(self.device)
        return need < 0.25 * free

    def _empty_window(self) -> dict[str, Any]:
        zero = torch.zeros((), device=self.device)
        return {"episodes": zero, "return": zero, "agent_return": torch.zeros(self.settings.n_uav, device=self.device),
                "completion": zero, "collisions": zero, "env_time": 0.0, "env_steps": 0}

    # -- the loop's interface -----------------------------------------------------------------------------------

    def probe_store(self) -> ReplayBuffer:
        """A buffer of random-policy transitions for ``hardware.batch_size=auto``'s trial steps."""
        if len(self.buffer) == 0:
            self.collect(max(1, -(-self.cfg.hardware.max_batch_size // self.cfg.env.n_envs)), explore=True)
        return self.buffer

    def k(self, stage: int) -> int:
        return 0  # no candidate budget

    def step_k(self, step: int, stage: int) -> int:
        return 0

    def restart(self, step: int, batch_size: int) -> None:
        """Nothing to rewind: the environments and the buffer are restored with the checkpoint."""

    def next(self, step: int, stage: int, batch_size: int) -> Transitions:
        alg = self.cfg.algorithm
        self.collect(alg.env_steps_per_update, explore=self.env_steps < alg.learning_starts)
        generator = torch.Generator(device=self.buffer.device).manual_seed(self.cfg.seed * 1_000_003 + step)
        beta = alg.priority_beta + (1.0 - alg.priority_beta) * min(1.0, step / max(1, self.cfg.train.steps))
        batch = self.buffer.sample(batch_size // distributed.context().world_size, generator, beta)
        if self.cfg.hardware.pin_memory and self.buffer.device != self.device:  # host buffer -> GPU: async copy
            batch = batch.pin_memory()
        return batch.to(self.device, non_blocking=True)

    def items(self, batch: Transitions) -> int:
        return len(batch)

    def feedback(self, batch: Transitions, values: torch.Tensor | None) -> None:
        if values is not None:
            self.buffer.update_priorities(batch.index, values)

    @torch.no_grad()
    def collect(self, steps: int, explore: bool) -> None:
        """Advance every environment ``steps`` steps and store the transitions."""
        start = time.perf_counter()
        agents = unwrap(self.model)
        w = self._window
        for _ in range(steps):
            action = random_policy(self.env) if explore else agents.act(self.obs, self.env.generator)
            step = self.env.step(action)
            self.buffer.add(obs=self.obs, state=self.state, action=action, reward=step.reward,
                            next_obs=step.next_obs, next_state=step.next_state, done=step.done.float())
            self.obs, self.state = step.obs, step.state
            done = step.done.float()
            w["episodes"] = w["episodes"] + done.sum()
            w["return"] = w["return"] + (step.episode_return * done).sum()
            w["agent_return"] = w["agent_return"] + (step.agent_return * done[:, None]).sum(0)
            w["completion"] = w["completion"] + (step.episode_completion * done).sum()
            w["collisions"] = w["collisions"] + step.collisions.sum()
        self.env_steps += steps * self.env.n_envs
        w["env_steps"] += steps * self.env.n_envs
        w["env_time"] += time.perf_counter() - start

    def window_stats(self) -> dict[str, float]:
        """Means since the last call (one host sync per log line): episodes finished, env speed, buffer."""
        w, self._window = self._window, self._empty_window()
        episodes = float(w["episodes"])
        stats = {"train/env_steps": float(self.env_steps), "train/buffer_size": float(len(self.buffer)),
                 "perf/env_steps_per_s": w["env_steps"] / max(w["env_time"], 1e-9),
                 "perf/agent_steps_per_s": w["env_steps"] * self.env.n_uav / max(w["env_time"], 1e-9),
                 "train/collisions_per_env_step": float(w["collisions"]) / max(w["env_steps"], 1)}
        if episodes > 0:
            agent = (w["agent_return"] / episodes).tolist()
            stats.update({"train/episode_return": float(w["return"]) / episodes,
                          "train/completion_rate": float(w["completion"]) / episodes,
                          "train/agent_return_min": min(agent), "train/agent_return_max": max(agent)})
            if len(agent) <= MAX_AGENTS_LOGGED:
                stats.update({f"train/agent_return/{i}": value for i, value in enumerate(agent)})
        return stats

    def validate(self, policy: nn.Module, stage: int, dtype: torch.dtype | None) -> dict[str, float]:
        if self._planner is None:
            self._val_env.generator.manual_seed(VAL_SEED)
            self._planner = run_episodes(self._val_env, scripted_planner).summary()
        agents = unwrap(policy)
        self._val_env.generator.manual_seed(VAL_SEED)
        scores = run_episodes(self._val_env, lambda env: agents.act(env.observe(), None)).summary()
        planner = self._planner["return"]
        return {"val/return": scores["return"], "val/completion_rate": scores["completion_rate"],
                "val/collisions": scores["collisions"], "val/planner_return": planner,
                "val/planner_gap": (planner - scores["return"]) / max(abs(planner), 1e-9)}

    def describe(self, val: dict[str, float], stage: int, best: float) -> str:
        return (f"val return {val['val/return']:.3f} (scripted planner {val['val/planner_return']:.3f}), "
                f"planner_gap {val['val/planner_gap']:.4f} (best {best:.4f}), "
                f"completion_rate {val['val/completion_rate']:.3f}")

    def checkpoint_extras(self) -> dict[str, Any]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {"env": self.env.state_dict(), "buffer": self.buffer.state_dict(), "obs": self.obs,
                "state": self.state, "env_steps": self.env_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.env.load_state_dict(state["env"])
        self.buffer.load_state_dict(state["buffer"])
        self.obs, self.state = state["obs"].to(self.device), state["state"].to(self.device)
        self.env_steps = state["env_steps"]
