"""The off-policy workload of the shared loop (``algorithm=masac``): environments, replay, validation episodes.

Before each training step the loop collects (the algorithm's cadence: one
collection per update): every environment advances ``env_steps_per_update``
steps with the current policy (uniform random actions for the first
``learning_starts`` environment steps) and the transitions are stored; then
the step's batch is sampled. Acting draws from the exploration stream (saved in
``last.pt`` with the environments and the buffer) and sampling from the replay
stream of (seed, step, rank) (``uavgnn.infrastructure.randomness``), so a resumed run repeats
the same steps. Under ``torchrun`` each rank steps its own environments (seeded
by rank) and DDP averages the gradients.

With the buffer on the host (``hardware.data_on_device`` false or too small a
GPU) and ``optim.prefetch``, each step also samples the next step's batch
(before that step's environment transitions exist: one collection stale, 16 of
100,000 transitions at the defaults) and starts its pinned, non_blocking copy
on a side CUDA stream, so the copy overlaps the update; the batch drawn ahead
is saved with ``last.pt``, so a resumed run trains on the same batches.

Validation plays ``env.val_episodes`` fixed episodes with the deterministic
policy against the scripted planner (``PlannerValidation``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from uavgnn.envs.policies import random_policy
from uavgnn.envs.replay import ReplayBuffer, Transitions
from uavgnn.envs.rl_workload import EnvRun, RLWorkload
from uavgnn.envs.saved_state import check_tensors
from uavgnn.envs.uav_env import make_env
from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.device import keep_on_device, unwrap
from uavgnn.infrastructure.randomness import restore_stream, stream, stream_seed


@dataclass(frozen=True)
class ReplaySettings:
    """The replay buffer and how it is filled and sampled (an off-policy algorithm's keys)."""

    buffer_size: int = 100_000  # transitions (one = all agents of one env step)
    learning_starts: int = 2_000  # env steps of random actions first
    env_steps_per_update: int = 1  # steps of every environment per update
    prioritized: bool = False
    priority_alpha: float = 0.6
    priority_beta: float = 0.4  # importance-weight exponent at step 0, annealed to 1 at ``anneal_steps``
    anneal_steps: int = 1  # ``train.steps``


class Experience(RLWorkload):
    """Environments stepped by the learner's policy feeding a replay buffer (``algorithm=masac``)."""

    unit = "samples"

    def __init__(self, run: EnvRun, replay: ReplaySettings, model: nn.Module, device: torch.device) -> None:
        super().__init__(run, model, device)
        self.replay = alg = replay
        rank = distributed.context().rank
        self.env = make_env(
            self.settings, self.dist, self.settings.n_envs, device, seed=stream_seed(run.seed, "environment", rank=rank)
        )
        self.exploration = stream(run.seed, "exploration", rank=rank, device=device)  # saved with the buffer
        self.obs, self.state = self.env.reset()
        n, shapes = (
            self.settings.n_uav,
            {"obs": (self.settings.n_uav, self.settings.obs_dim()), "state": (self.settings.state_dim(self.dist),)},
        )
        shapes.update(next_obs=shapes["obs"], next_state=shapes["state"], action=(n, 2), reward=(n,), done=())
        nbytes = 4 * alg.buffer_size * sum(torch.Size(s).numel() for s in shapes.values())
        on_device = keep_on_device(run.loading.data_on_device, device, nbytes)
        self.buffer = ReplayBuffer(
            alg.buffer_size, shapes, device if on_device else torch.device("cpu"), alg.prioritized, alg.priority_alpha
        )
        self.prefetch = run.loading.prefetch and not on_device
        self.copy_stream = torch.cuda.Stream(device) if self.prefetch and device.type == "cuda" else None
        self.ahead: tuple[int, Transitions, Transitions] | None = None  # (step, host batch, its device copy)

    # -- the loop's interface -----------------------------------------------------------------------------------

    def probe_store(self) -> ReplayBuffer:
        """A buffer of random-policy transitions for ``hardware.batch_size=auto``'s trial steps."""
        if len(self.buffer) == 0:
            self.play(max(1, -(-self.run.loading.max_batch_size // self.settings.n_envs)), explore=True)
        return self.buffer

    def restart(self, step: int, batch_size: int) -> None:
        """Nothing to rewind: the environments and the buffer are restored with the checkpoint."""

    def collect(self, step: int) -> None:
        """Advance every environment ``algorithm.env_steps_per_update`` steps with the current policy (random
        actions for the first ``learning_starts`` environment steps) and store the transitions."""
        alg = self.replay
        self.play(alg.env_steps_per_update, explore=self.env_steps < alg.learning_starts)

    def batch(self, step: int, stage: int, batch_size: int) -> Transitions:
        """The step's share of ``batch_size`` transitions sampled from the buffer, on the training device (with
        ``optim.prefetch`` from a host buffer: drawn and copied the step before)."""
        size = batch_size // distributed.context().world_size
        if self.ahead is not None and self.ahead[0] == step and len(self.ahead[1]) == size:
            batch = self.ahead[2]
            if self.copy_stream is not None:  # the update must not read the copy before it lands
                torch.cuda.current_stream(self.device).wait_stream(self.copy_stream)
                for _, tensor in batch:
                    tensor.record_stream(torch.cuda.current_stream(self.device))
        else:
            batch = self.send(self.sample(step, size))
        if self.prefetch:
            host = self.sample(step + 1, size)
            self.ahead = (step + 1, host, self.send(host))
        return batch

    def sample(self, step: int, size: int) -> Transitions:
        """Step ``step``'s batch from the buffer as it is now: the replay stream of (seed, step, rank), beta
        annealed to 1."""
        alg = self.replay
        generator = stream(self.seed, "replay", step, distributed.context().rank, self.buffer.device)
        beta = alg.priority_beta + (1.0 - alg.priority_beta) * min(1.0, step / max(1, alg.anneal_steps))
        return self.buffer.sample(size, generator, beta)

    def send(self, batch: Transitions) -> Transitions:
        """A sampled batch on the training device: from a host buffer pinned and non_blocking (on the side
        stream when prefetching), so the host does not wait for the copy."""
        if self.buffer.device == self.device:
            return batch
        if self.run.loading.pin_memory or self.copy_stream is not None:
            batch = batch.pin_memory()
        if self.copy_stream is None:
            return batch.to(self.device, non_blocking=True)
        with torch.cuda.stream(self.copy_stream):
            return batch.to(self.device, non_blocking=True)

    def items(self, batch: Transitions) -> int:
        return len(batch)

    def feedback(self, batch: Transitions, values: torch.Tensor | None) -> None:
        if values is not None:
            self.buffer.update_priorities(batch.index, values)

    @torch.no_grad()
    def play(self, steps: int, explore: bool) -> None:
        """Advance every environment ``steps`` steps and store the transitions."""
        agents = unwrap(self.model)
        for _ in range(steps):
            action = (
                random_policy(self.env, self.exploration) if explore else agents.act(self.obs, None, self.exploration)
            )
            step = self.env.step(action)
            self.buffer.add(
                obs=self.obs,
                state=self.state,
                action=action,
                reward=step.reward,
                next_obs=step.obs,
                next_state=step.state,
                done=step.done.float(),
            )
            self.obs, self.state = step.obs, step.state
            self.record(step, step.done)
        self.collected()

    def window_stats(self) -> dict[str, float]:
        return {**super().window_stats(), "train/buffer_size": float(len(self.buffer))}

    def state_dict(self) -> dict[str, Any]:
        ahead = None if self.ahead is None else (self.ahead[0], self.ahead[1].index, self.ahead[1].weight)
        return {
            "env": self.env.state_dict(),
            "buffer": self.buffer.state_dict(),
            "obs": self.obs,
            "state": self.state,
            "env_steps": self.env_steps,
            "ahead": ahead,
            "window": self.window_state(),
            "exploration": self.exploration.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.env.load_state_dict(state["env"])
        self.buffer.load_state_dict(state["buffer"])
        check_tensors(
            "current observations",
            {"obs": state["obs"], "state": state["state"]},
            {"obs": self.obs.shape, "state": self.state.shape},
        )
        if state.get("ahead") is not None:
            index = state["ahead"][1]
            if index.numel() and not (0 <= int(index.min()) and int(index.max()) < len(self.buffer)):
                raise ValueError(f"the batch drawn ahead: slots beyond the replay buffer's {len(self.buffer)}")
        self.load_window(state.get("window"))
        if "exploration" in state:  # saved before named streams: the continuation draws this version's stream
            restore_stream(self.exploration, state["exploration"], "the exploration noise")
        self.obs, self.state = state["obs"].to(self.device), state["state"].to(self.device)
        self.env_steps = state["env_steps"]
        self.ahead = None
        if self.prefetch and state.get("ahead") is not None:  # the batch drawn ahead, re-gathered from the buffer
            step, index, weight = state["ahead"]
            host = self.buffer.gather(index.to(self.buffer.device), weight.to(self.buffer.device))
            self.ahead = (step, host, self.send(host))
