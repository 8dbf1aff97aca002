"""``algorithm=a2c``: advantage actor-critic with one actor and one critic shared by the UAVs, a plug-in from
outside uavgnn (the example of docs/adding-an-algorithm.md, trained, resumed, evaluated and compared by the tests).

The entry point in ``uavgnn_a2c-0.1.dist-info/entry_points.txt`` beside this file registers it, as ``pip install``
of ``pyproject.toml`` here would::

    [uavgnn.algorithms]
    a2c = uavgnn_a2c:A2C

The policy: every UAV's observation o goes through one MLP to the mean of a Gaussian over its velocity u (a
learned std per component; the environment clips what it flies), and through another to a value V(o). Each
update trains on ``hardware.batch_size`` episodes its policy has just flown (the on-policy base collects them):

  A_t = GAE(gamma, lambda) of r_t and V(o_t)            every UAV's advantage, all steps at once
  L   = -mean A_t log pi(u_t | o_t)                      the policy gradient (A_t a constant)
        + value_coef x mean (A_t + V(o_t) - V(o_t))^2     the critic regressed on the lambda-returns
        - entropy_coef x mean H(pi(. | o_t))              exploration
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch
from omegaconf import OmegaConf
from torch import nn

from uavgnn.algorithms.base import StepOutput
from uavgnn.algorithms.on_policy import OnPolicy, OnPolicyConfig
from uavgnn.algorithms.rl_math import gae
from uavgnn.config.settings import env_settings
from uavgnn.config.validation import AT_LEAST_1, NON_NEGATIVE, UNIT, ranged
from uavgnn.envs.on_policy import Episodes, EpisodeWorkload
from uavgnn.infrastructure.device import unwrap
from uavgnn.models.agent_stack import MLPConfig, mlp_net

VELOCITY = 2  # a continuous action: the velocity (x, y), each in [-1, 1] x the top speed


@dataclass
class A2CConfig(OnPolicyConfig):
    """The keys of ``algorithm=a2c`` (the schema Hydra checks: another algorithm's key is an error)."""

    name: str = "a2c"
    gamma: float = ranged(0.95, UNIT)  # discount
    gae_lambda: float = ranged(0.9, UNIT)  # GAE's lambda: the advantages' bias against their variance
    value_coef: float = ranged(0.5, NON_NEGATIVE)  # the critic's loss weight
    entropy_coef: float = ranged(0.001, NON_NEGATIVE)  # the entropy bonus
    minibatches: int = ranged(1, AT_LEAST_1)  # one update per collection: plain A2C
    data_passes: int = ranged(1, AT_LEAST_1)


class A2CAgents(nn.Module):
    """The networks (``uavgnn.algorithms.base.EnvAgents``): a Gaussian actor and a critic, shared by every UAV."""

    acting = ("actor", "log_std")  # what ``play`` reads: the part of a checkpoint mode=eval loads

    def __init__(self, obs_dim: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.actor = nn.Sequential(mlp_net(obs_dim, hidden, layers, VELOCITY), nn.Tanh())
        self.log_std = nn.Parameter(torch.full((VELOCITY,), math.log(0.3)))
        self.critic = mlp_net(obs_dim, hidden, layers, 1)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def log_prob(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """(..., N) log pi(u | o) of velocities u (..., N, 2) for observations o (..., N, obs_dim)."""
        z = (action - self.actor(obs)) / self.log_std.exp()
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)

    def entropy(self) -> torch.Tensor:
        """The Gaussian's entropy (the same for every observation: its std is learned, not predicted)."""
        return (self.log_std + 0.5 * math.log(2 * math.pi * math.e)).sum()

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """(..., N) V(o)."""
        return self.critic(obs).squeeze(-1)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, avail: torch.Tensor | None, generator: torch.Generator | None) -> torch.Tensor:
        """(E, N, 2) velocities: drawn with ``generator``, the mean without (every velocity is available)."""
        mean = self.actor(obs)
        if generator is None:
            return mean
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        return mean + self.log_std.exp() * noise

    def play(self, env: Any, generator: torch.Generator | None = None) -> torch.Tensor:
        """The policy as validation, the test phase, mode=eval and mode=compare fly it."""
        return self.act(env.observe(), None, generator)


def a2c_loss(agents: A2CAgents, batch: Episodes, alg: A2CConfig) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(loss, stats) of a batch of episodes: every episode, step and UAV at once; steps after an episode's end are
    masked out."""
    value = agents.value(batch.obs)  # (B, T, N)
    advantage, returns = gae(batch.reward, batch.done, value.detach(), alg.gamma, alg.gae_lambda)
    weight = batch.mask[..., None].expand_as(value)
    count = weight.sum().clamp(min=1.0)
    policy_loss = -(agents.log_prob(batch.obs, batch.action) * advantage * weight).sum() / count
    value_loss = ((returns - value).pow(2) * weight).sum() / count
    entropy = agents.entropy()
    loss = policy_loss + alg.value_coef * value_loss - alg.entropy_coef * entropy
    return loss, {"policy_loss": policy_loss.detach(), "value_loss": value_loss.detach(), "entropy": entropy.detach()}


class A2C(OnPolicy):
    """The plug-in. ``OnPolicy`` gives it its collections (``minibatches x data_passes`` updates each) and refuses
    ``hardware.batch_size=auto``; ``EnvPolicy`` beneath it the validation against the scripted planner
    (``best.pt``), the test table and pictures, and checkpoints that ``mode=eval`` and ``mode=compare`` play."""

    name, config = "a2c", A2CConfig
    capabilities = replace(OnPolicy.capabilities, models={"mlp": MLPConfig}, actions=("continuous",))

    def __init__(self, cfg: Any, device: torch.device) -> None:
        super().__init__(cfg, device)
        self.settings: A2CConfig = OmegaConf.to_object(cfg.algorithm)  # plain values: a compiled step reads them

    @classmethod
    def build_model(cls, cfg: Any) -> A2CAgents:
        return A2CAgents(env_settings(cfg).obs_dim(), cfg.model.hidden, cfg.model.layers)

    def workload(self, model: nn.Module) -> EpisodeWorkload:
        """Episodes flown by the current policy: ``hardware.batch_size`` per minibatch (``env_run``: the typed
        ``env``, ``task``, seed and loading settings)."""
        batch_size, minibatches = int(self.cfg.hardware.batch_size), int(self.cfg.algorithm.minibatches)
        return EpisodeWorkload(self.env_run(), model, self.device, batch_size, minibatches)

    def training_step(self, model: nn.Module, batch: Episodes, draws: None) -> StepOutput:
        loss, stats = a2c_loss(unwrap(model), batch, self.settings)
        return StepOutput(loss, stats, batch.mask.sum() * batch.reward.shape[-1])
