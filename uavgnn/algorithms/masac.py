"""``algorithm=masac``: multi-agent soft actor-critic with every agent batched (reference/002's path planning).

Per-agent tanh-Gaussian actors (their own weights; or one shared graph-Transformer
actor, ``GraphActor``, when ``model`` is a TransformerGNN size) and, per agent, twin
centralised critics Q_i(state, o_i, joint action) with Polyak-averaged targets and
a learned entropy temperature alpha_i (target entropy -action_dim). The critic
sees the global state and agent i's own observation: the state is absolute,
the observation is the same world relative to agent i (what its Q is about),
which the critics learn from faster (BENCHMARKS.md). One update, for all agents at once:

  y_i   = r_i + gamma (1 - done) (min_k Qtarget_ik(s', o'_i, a') - alpha_i log pi_i(a'_i | o'_i)),  a' ~ pi(o')
  L_Q   = sum_i sum_k mean_b w_b (Q_ik(s, o_i, a) - y_i)^2          (w: prioritized-replay importance weights)
  L_pi  = sum_i mean_b (alpha_i log pi_i(a_i | o_i) - min_k Q_ik(s, o_i, a_1..a_i..a_N))   (only a_i: gradient)
  L_a   = sum_i mean_b -log alpha_i (log pi_i + target_entropy)

The agents' weights are stacked (``AgentStack``: one batched matmul per layer), so each
actor runs once per update (not n_agents^2 times) and each network family is
one batched call; the three losses touch disjoint parameters (the critics are
read through detached weights in L_pi), so their sum has one backward - the
same gradients as per-agent updates (tested against ``masac_naive``) - and
each network family its own optimiser step (``networks``). The policy noise
comes in as tensors, so the update (``masac_loss``) is a pure function of
(weights, batch, noise). The data side is off-policy replay (``Experience``):
one collection of every environment before each update (``cadence``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from uavgnn.algorithms.base import AlgorithmConfig, Cadence, Capabilities, Network, StepOutput
from uavgnn.algorithms.env_policy import AGENT_MODELS, EnvPolicy
from uavgnn.algorithms.rl_math import lerp_all_
from uavgnn.config.settings import env_settings, scene_distribution
from uavgnn.config.validation import AT_LEAST_1, NON_NEGATIVE, POSITIVE, UNIT, Range, ranged
from uavgnn.envs.experience import Experience, ReplaySettings
from uavgnn.envs.replay import Transitions
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.device import unwrap
from uavgnn.infrastructure.randomness import stream
from uavgnn.models.agent_stack import AgentStack, mlp_net
from uavgnn.models.graph_actor import GraphActor
from uavgnn.problem.observation import ObservationLayout
from uavgnn.problem.scenes import SceneDistribution

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def squash(mean: torch.Tensor, log_std: torch.Tensor, noise: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(tanh-squashed action, its log-probability summed over action dims); deterministic tanh(mean) if no noise."""
    if noise is None:
        action = torch.tanh(mean)
        return action, torch.zeros_like(mean[..., 0])
    log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
    u = mean + log_std.exp() * noise  # presquashed's sample, the clamped log_std kept for the log-probability
    gaussian = (-0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    correction = (2 * (math.log(2.0) - u - F.softplus(-2 * u))).sum(-1)  # log(1 - tanh(u)^2), stably
    return torch.tanh(u), gaussian - correction


def presquashed(mean: torch.Tensor, log_std: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """The Gaussian sample ``squash`` squashes, without its log-probability (acting needs none: 11 ops a step)."""
    return mean + log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp() * noise


@dataclass
class MASACSettings:
    n_agents: int
    obs_dim: int
    state_dim: int
    action_dim: int
    hidden: int  # actor width
    layers: int  # actor hidden layers
    critic_hidden: int
    critic_layers: int
    gamma: float
    init_alpha: float
    graph_actor: tuple[ObservationLayout, int, int] | None = None  # (layout, heads, ffn_mult): shared GNN actor


class MASACAgents(nn.Module):
    """All agents' actors, twin critics, target critics (buffers) and temperatures."""

    acting = ("actors",)  # what ``play`` reads: all of a checkpoint that ``load_env_policy`` loads

    def __init__(self, s: MASACSettings) -> None:
        super().__init__()
        self.s = s
        n, a = s.n_agents, s.action_dim
        if s.graph_actor is None:  # per-agent weights, stacked
            self.actors: nn.Module = AgentStack(lambda: mlp_net(s.obs_dim, s.hidden, s.layers, 2 * a), n)
        else:  # one graph-Transformer shared by every agent
            layout, heads, ffn_mult = s.graph_actor
            self.actors = GraphActor(layout, 2 * a, s.hidden, heads, s.layers, ffn_mult)
        self.critics = AgentStack(
            lambda: mlp_net(s.state_dim + s.obs_dim + n * a, s.critic_hidden, s.critic_layers, 1), 2 * n
        )
        for i, w in enumerate(self.critics.weights):
            self.register_buffer(f"target_{i}", w.detach().clone())
        self.log_alpha = nn.Parameter(torch.full((n,), math.log(s.init_alpha)))
        self.target_entropy = -float(a)

    def targets(self) -> list[torch.Tensor]:
        return [getattr(self, f"target_{i}") for i in range(len(self.critics.weights))]

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def policy(self, obs: torch.Tensor, noise: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Agent-major obs (N, B, obs_dim) -> (actions (N, B, A), log-probs (N, B))."""
        mean, log_std = self.actors(obs).chunk(2, dim=-1)
        return squash(mean, log_std, noise)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, avail: torch.Tensor | None, generator: torch.Generator | None) -> torch.Tensor:
        """Actions (E, N, A) for env observations (E, N, obs_dim): sampled, or the mean without a generator
        (``avail``: continuous actions are all available)."""
        mean, log_std = self.actors(obs.transpose(0, 1).to(self.log_alpha.dtype)).chunk(2, dim=-1)
        if generator is not None:
            mean = presquashed(mean, log_std, torch.randn(mean.shape, generator=generator, device=obs.device))
        return torch.tanh(mean).transpose(0, 1)

    def play(self, env, generator: torch.Generator | None = None) -> torch.Tensor:
        """The policy as an environment policy (``uavgnn.envs.policies.Policy``)."""
        return self.act(env.observe(), None, generator)

    def q_values(self, state: torch.Tensor, obs: torch.Tensor, joint: torch.Tensor, weights=None) -> torch.Tensor:
        """(N, 2, B) twin Q of every agent from the state (B, S), agent-major observations (N, B, obs_dim) and the
        joint action, (B, N*A) for all agents or (N, B, N*A) per agent."""
        n = self.s.n_agents
        joint = joint.expand(n, *joint.shape) if joint.dim() == 2 else joint
        inputs = torch.cat([state.expand(n, *state.shape), obs, joint], -1).repeat_interleave(2, dim=0)
        q = self.critics(inputs, weights=weights)
        return q.squeeze(-1).view(n, 2, *q.shape[1:-1])

    @torch.no_grad()
    def update_targets(self, tau: torch.Tensor) -> None:
        """Polyak averaging: target <- (1 - tau) target + tau critic (one foreach op, not one per agent or tensor;
        ``tau`` a device scalar: 0 after a skipped update)."""
        lerp_all_(self.targets(), list(self.critics.weights), tau)


def masac_loss(
    agents: MASACAgents, batch: Transitions, noise: torch.Tensor, next_noise: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    """(total loss, stats, |TD error| per transition) for agent-major noise (N, B, A) now and next."""
    n, gamma = agents.s.n_agents, agents.s.gamma
    alpha = agents.log_alpha.exp().detach()
    obs, next_obs = batch.obs.transpose(0, 1), batch.next_obs.transpose(0, 1)  # agent-major
    with torch.no_grad():
        next_action, next_logp = agents.policy(next_obs, next_noise)
        q_next = agents.q_values(batch.next_state, next_obs, next_action.transpose(0, 1).flatten(1), agents.targets())
        soft_v = q_next.min(1).values - alpha[:, None] * next_logp
        y = batch.reward.T + gamma * (1 - batch.done)[None] * soft_v  # (N, B)
    q = agents.q_values(batch.state, obs, batch.action.flatten(1))
    td = q - y[:, None]
    critic_loss = (batch.weight * td.pow(2)).mean(-1).sum()

    action, logp = agents.policy(obs, noise)
    fixed = action.detach().transpose(0, 1)[None]  # (1, B, N, A)
    own = torch.eye(n, device=action.device)[:, None, :, None]  # agent i's own block
    joint = fixed + own * (action.transpose(0, 1)[None] - fixed)  # values = all actions, gradient = own only
    frozen = [w.detach() for w in agents.critics.weights]
    q_pi = agents.q_values(batch.state, obs, joint.flatten(2), frozen).min(1).values
    actor_loss = (alpha[:, None] * logp - q_pi).mean(-1).sum()
    alpha_loss = -(agents.log_alpha[:, None] * (logp.detach() + agents.target_entropy)).mean(-1).sum()
    stats = {
        "critic_loss": critic_loss.detach(),
        "actor_loss": actor_loss.detach(),
        "alpha": alpha.mean(),
        "entropy": -logp.detach().mean(),
        "q": q.detach().mean(),
    }
    return critic_loss + actor_loss + alpha_loss, stats, td.detach().abs().mean((0, 1))


@dataclass
class MASACConfig(AlgorithmConfig):
    name: str = "masac"
    gamma: float = ranged(0.95, UNIT)  # discount
    tau: float = ranged(0.005, Range(0, 1, low_open=True))  # Polyak step of the target critics
    init_alpha: float = ranged(0.2, POSITIVE)  # initial entropy temperature (learned per agent, target entropy -2)
    actor_lr_scale: float = ranged(1.0, POSITIVE)  # actor LR = train.lr x this (train.lr is the critics')
    alpha_lr_scale: float = ranged(1.0, POSITIVE)  # temperature LR = train.lr x this
    critic_grad_clip: Optional[float] = ranged(None, POSITIVE)  # max gradient norm of the critics (null: train's)
    actor_grad_clip: Optional[float] = ranged(None, POSITIVE)  # max gradient norm of the actors (null: train's)
    alpha_grad_clip: Optional[float] = ranged(None, POSITIVE)  # max gradient norm of the temperatures (null: train's)
    critic_hidden: int = ranged(128, AT_LEAST_1)  # centralised critic width
    critic_layers: int = ranged(2, AT_LEAST_1)  # centralised critic hidden layers
    buffer_size: int = ranged(100_000, AT_LEAST_1)  # replay capacity (one entry = all agents of one env step)
    learning_starts: int = ranged(2_000, NON_NEGATIVE)  # env steps of random actions first
    env_steps_per_update: int = ranged(1, AT_LEAST_1)  # steps of all env.n_envs environments per update
    prioritized: bool = False  # prioritized replay (vectorised sum-tree) instead of uniform
    priority_alpha: float = ranged(0.6, POSITIVE)  # priority exponent
    priority_beta: float = ranged(0.4, UNIT)  # importance-weight exponent at step 0, annealed to 1 at train.steps


class MASAC(EnvPolicy):
    """The plug-in: the update's noise from its own stream of (seed, step, rank), so a resumed run repeats it."""

    name = "masac"
    streams = {"update_noise": "MASAC's reparameterised actions inside an update"}
    timed_by = "benchmarks/bench_masac.py"
    config = MASACConfig
    # per-agent MLP actors or one shared graph actor, flying velocity commands; off-policy, from replay
    capabilities = Capabilities(models=AGENT_MODELS, actions=("continuous",), centralised_critic=True)

    @classmethod
    def build_model(cls, cfg: Any) -> MASACAgents:
        env, dist, alg = env_settings(cfg), scene_distribution(cfg), cfg.algorithm
        graph = None if cls.is_mlp(cfg) else (env.layout(), cfg.model.heads, cfg.model.ffn_mult)
        return MASACAgents(
            MASACSettings(
                env.n_uav,
                env.obs_dim(),
                env.state_dim(dist),
                env.action_dim(),
                cfg.model.hidden,
                cfg.model.layers,
                alg.critic_hidden,
                alg.critic_layers,
                alg.gamma,
                alg.init_alpha,
                graph,
            )
        )

    def workload(self, model: nn.Module) -> Experience:
        alg = self.cfg.algorithm
        replay = ReplaySettings(
            alg.buffer_size,
            alg.learning_starts,
            alg.env_steps_per_update,
            alg.prioritized,
            alg.priority_alpha,
            alg.priority_beta,
            self.cfg.train.steps,
        )
        return Experience(self.env_run(), replay, model, self.device)

    def cadence(self) -> Cadence:
        return Cadence(updates=1)

    def draws(self, batch: Transitions, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The reparameterisation noise (N, B, A) of the actions now and at the next state."""
        generator = stream(self.cfg.seed, "update_noise", step, distributed.context().rank, self.device)
        shape = (2, batch.obs.shape[1], len(batch), batch.action.shape[-1])
        return torch.randn(shape, generator=generator, device=self.device).unbind(0)

    def training_step(
        self, model: nn.Module, batch: Transitions, draws: tuple[torch.Tensor, torch.Tensor]
    ) -> StepOutput:
        loss, stats, td = masac_loss(unwrap(model), batch, *draws)
        return StepOutput(loss, stats, torch.full((), float(len(batch)), device=batch.obs.device), feedback=td)

    def networks(self, model: nn.Module) -> list[Network]:
        """Critics at ``train.lr``, actors and temperatures at their own multiples of it; each its own clip."""
        agents, alg = unwrap(model), self.cfg.algorithm
        return [
            Network("critics", list(agents.critics.parameters()), 1.0, alg.critic_grad_clip),
            Network("actors", list(agents.actors.parameters()), alg.actor_lr_scale, alg.actor_grad_clip),
            Network("temperatures", [agents.log_alpha], alg.alpha_lr_scale, alg.alpha_grad_clip),
        ]

    def after_step(self, model: nn.Module, applied: torch.Tensor) -> None:
        unwrap(model).update_targets(self.cfg.algorithm.tau * applied)

    @classmethod
    def self_check(cls, device: torch.device) -> bool:
        """A step of 8 environments of 4 UAVs, then one update on those transitions."""
        dist, generator = SceneDistribution(), torch.Generator(device=device).manual_seed(0)
        settings = EnvSettings(n_uav=4, action="continuous")
        env = UAVEnv(settings, dist, 8, device, seed=0)
        obs, state = env.reset()
        agents = MASACAgents(
            MASACSettings(4, settings.obs_dim(), settings.state_dim(dist), 2, 32, 2, 32, 2, 0.95, 0.2)
        ).to(device)
        action = agents.act(obs, None, generator)
        step = env.step(action)
        batch = Transitions(
            obs,
            state,
            action,
            step.reward,
            step.obs,
            step.state,
            step.done.float(),
            torch.ones(8, device=device),
            torch.arange(8, device=device),
        )
        masac_loss(agents, batch, *torch.randn(2, 4, 8, 2, device=device).unbind(0))[0].backward()
        return True
