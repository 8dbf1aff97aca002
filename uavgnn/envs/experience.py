"""The reinforcement-learning workload of the shared loop: environments, replay, validation episodes.

Each training step first advances every environment ``env_steps_per_update``
steps with the current policy (uniform random actions for the first
``learning_starts`` environment steps), stores the transitions, then samples
the step's batch. Acting draws from the environments' own generator and
sampling from a generator of (seed, step); both, with the environments and the
buffer, are saved in ``last.pt``, so a resumed run repeats the same steps.
Under ``torchrun`` each rank steps its own environments (seeded by rank) and
DDP averages the gradients.

Validation plays ``env.val_episodes`` fixed episodes with the deterministic
policy against the scripted planner (``PlannerValidation``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from uavgnn import distributed
from uavgnn.algorithms.base import unwrap
from uavgnn.envs.policies import random_policy
from uavgnn.envs.replay import ReplayBuffer, Transitions
from uavgnn.envs.rl_workload import RLWorkload
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.runtime import keep_on_device


class Experience(RLWorkload):
    """Environments stepped by the learner's policy feeding a replay buffer (``algorithm=masac``)."""

    unit = "samples"

    def __init__(self, cfg, model: nn.Module, device: torch.device) -> None:
        super().__init__(cfg, model, device)
        alg = cfg.algorithm
        rank = distributed.context().rank
        self.env = UAVEnv(self.settings, self.dist, cfg.env.n_envs, device, seed=cfg.seed * 7919 + rank)
        self.obs, self.state = self.env.reset()
        n, shapes = self.settings.n_uav, {"obs": (self.settings.n_uav, self.settings.obs_dim()),
                                          "state": (self.settings.state_dim(self.dist),)}
        shapes.update(next_obs=shapes["obs"], next_state=shapes["state"], action=(n, 2), reward=(n,), done=())
        nbytes = 4 * alg.buffer_size * sum(torch.Size(s).numel() for s in shapes.values())
        on_device = keep_on_device(cfg.hardware.data_on_device, device, nbytes)
        self.buffer = ReplayBuffer(alg.buffer_size, shapes, device if on_device else torch.device("cpu"),
                                   alg.prioritized, alg.priority_alpha)

    # -- the loop's interface -----------------------------------------------------------------------------------

    def probe_store(self) -> ReplayBuffer:
        """A buffer of random-policy transitions for ``hardware.batch_size=auto``'s trial steps."""
        if len(self.buffer) == 0:
            self.collect(max(1, -(-self.cfg.hardware.max_batch_size // self.cfg.env.n_envs)), explore=True)
        return self.buffer

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
        agents = unwrap(self.model)
        for _ in range(steps):
            action = random_policy(self.env) if explore else agents.act(self.obs, self.env.generator)
            step = self.env.step(action)
            self.buffer.add(obs=self.obs, state=self.state, action=action, reward=step.reward,
                            next_obs=step.next_obs, next_state=step.next_state, done=step.done.float())
            self.obs, self.state = step.obs, step.state
            self.record(step, step.done)
        self.collected()

    def window_stats(self) -> dict[str, float]:
        return {**super().window_stats(), "train/buffer_size": float(len(self.buffer))}

    def state_dict(self) -> dict[str, Any]:
        return {"env": self.env.state_dict(), "buffer": self.buffer.state_dict(), "obs": self.obs,
                "state": self.state, "env_steps": self.env_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.env.load_state_dict(state["env"])
        self.buffer.load_state_dict(state["buffer"])
        self.obs, self.state = state["obs"].to(self.device), state["state"].to(self.device)
        self.env_steps = state["env_steps"]
