"""``algorithm=toy``: REINFORCE with one small MLP shared by the UAVs, an example plug-in from outside uavgnn.

What registers it is the entry point in ``uavgnn_toy-0.1.dist-info/entry_points.txt`` next to this file::

    [uavgnn.algorithms]
    toy = uavgnn_toy:Toy

With this folder on PYTHONPATH (or a package installed whose pyproject.toml declares the same under
``[project.entry-points."uavgnn.algorithms"]``), ``python run.py algorithm=toy train.steps=200`` trains it,
resumes it, ``mode=eval ckpt=`` and ``mode=compare`` read its runs: no file of uavgnn changes.

The policy: one small MLP shared by every UAV maps its observation to a mean velocity; the UAV flies a Gaussian
draw u around it with a fixed std (``algorithm.noise``; the environment clips what it flies). The update is
REINFORCE on one collection of ``hardware.batch_size`` fresh episodes per step:

  G_t = r_t + gamma G_{t+1}           each UAV's discounted return-to-go in its episode
  A_t = (G_t - mean G) / std G        normalised over the collection's steps: the baseline
  L   = -mean of A_t log pi(u_t | o_t)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from uavgnn.algorithms.base import AlgorithmConfig, Cadence, Capabilities, StepOutput
from uavgnn.algorithms.env_policy import EnvPolicy
from uavgnn.algorithms.rl_math import td_lambda_targets
from uavgnn.config.settings import env_settings
from uavgnn.config.validation import AT_LEAST_1, POSITIVE, UNIT, ranged
from uavgnn.envs.on_policy import Episodes, EpisodeWorkload
from uavgnn.infrastructure.device import unwrap


@dataclass
class ToyConfig(AlgorithmConfig):
    """The keys of ``algorithm=toy`` (the schema Hydra checks: another algorithm's key is an error)."""

    name: str = "toy"
    hidden: int = ranged(16, AT_LEAST_1)  # the policy's hidden width
    noise: float = ranged(0.3, POSITIVE)  # std of each velocity component around the policy's mean
    gamma: float = ranged(0.95, UNIT)  # discount of the returns-to-go


class ToyAgents(nn.Module):
    """The networks (``base.EnvAgents``): the shared MLP, observation -> mean velocity in [-1, 1]^2."""

    acting = ("actor",)  # what ``play`` reads: all of a checkpoint that mode=eval and mode=compare load

    def __init__(self, obs_dim: int, hidden: int, noise: float) -> None:
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, 2), nn.Tanh())
        self.noise = noise

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def log_prob(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """(..., N) log pi(u | o) of velocities u (..., N, 2) for observations o (..., N, obs_dim)."""
        z = (action - self.actor(obs)) / self.noise
        return (-0.5 * z.pow(2) - math.log(self.noise) - 0.5 * math.log(2 * math.pi)).sum(-1)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, avail: torch.Tensor | None, generator: torch.Generator | None) -> torch.Tensor:
        """(E, N, 2) velocities: drawn with ``generator``, the mean without (every velocity is available)."""
        mean = self.actor(obs.to(self.actor[0].weight.dtype))
        if generator is None:
            return mean
        return mean + self.noise * torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)

    def play(self, env: Any, generator: torch.Generator | None = None) -> torch.Tensor:
        """The policy as validation, the test phase, mode=eval and mode=compare fly it."""
        return self.act(env.observe(), None, generator)


def reinforce_loss(agents: ToyAgents, batch: Episodes, gamma: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(loss, stats) of a collection: every episode, step and UAV at once; steps after an episode's end masked."""
    zeros = torch.zeros_like(batch.reward)
    returns = td_lambda_targets(batch.reward, batch.done, zeros, gamma, 1.0)  # lambda = 1: the returns-to-go
    weight = batch.mask[..., None].expand_as(returns)
    count = weight.sum().clamp(min=1.0)
    mean = (returns * weight).sum() / count
    std = (((returns - mean).pow(2) * weight).sum() / count).sqrt()
    logp = agents.log_prob(batch.obs, batch.action)
    loss = -(logp * (returns - mean) / (std + 1e-8) * weight).sum() / count
    return loss, {"return_to_go": mean.detach(), "log_prob": (logp.detach() * weight).sum() / count}


class Toy(EnvPolicy):
    """The plug-in. ``EnvPolicy`` gives it validation against the scripted planner's score (``best.pt``), the test
    table and pictures, and checkpoints that ``mode=eval`` and ``mode=compare`` play back."""

    name, config = "toy", ToyConfig
    # its own networks (no model group), velocity commands, on-policy: a batch is episodes, never auto
    capabilities = Capabilities(actions=("continuous",), on_policy=True, auto_batch_size=False)

    @classmethod
    def build_model(cls, cfg: Any) -> ToyAgents:
        return ToyAgents(env_settings(cfg).obs_dim(), cfg.algorithm.hidden, cfg.algorithm.noise)

    def workload(self, model: nn.Module) -> EpisodeWorkload:
        """Fresh on-policy episodes: ``hardware.batch_size`` of them, one minibatch, each collection (``env_run``:
        the typed ``env``, ``task``, seed and loading settings)."""
        return EpisodeWorkload(self.env_run(), model, self.device, int(self.cfg.hardware.batch_size), minibatches=1)

    def cadence(self) -> Cadence:
        return Cadence(updates=1)  # collect before every update: plain policy gradient is on-policy

    def training_step(self, model: nn.Module, batch: Episodes, draws: None) -> StepOutput:
        loss, stats = reinforce_loss(unwrap(model), batch, float(self.cfg.algorithm.gamma))
        return StepOutput(loss, stats, batch.mask.sum() * batch.reward.shape[-1])
