"""``algorithm=mappo``: multi-agent PPO with a centralised value function, every agent and step batched.

A shared actor - an MLP over the agent's observation and its one-hot id (parameter sharing, ``model=mlp``), or
one graph-Transformer over the UAV's observation graph for any swarm size (``GraphActor``, ``model`` a
TransformerGNN size) - and a centralised critic V_i(state, o_i, id_i) per agent (MAPPO's agent-specific
global state). Continuous actions are a Gaussian u with a learned log-std per action dimension, flown as
tanh(u) (the tanh's Jacobian cancels in the ratio); discrete and goto actions a categorical over the
feasible ones. One collection of on-policy episodes (``EpisodeWorkload``) records each step's log-probability
and value, then ``data_passes`` passes of ``minibatches`` updates:

  A_t    = GAE(gamma, lambda) = G^lambda_t - V_t      the lambda-returns of the denormalised values, all steps
                                                      at once (``td_lambda_targets``), per agent
  rho_t  = pi(u_t | o_t) / pi_old(u_t | o_t)
  L_pi   = -mean of (min(rho A, clip(rho, 1 - eps, 1 + eps) A) + entropy_coef H(pi(. | o_t)))   (A normalised
                                                                                               per minibatch)
  L_V    = mean of (V_t - norm(G^lambda_t))^2         value normalisation: the critic predicts returns scaled by
                                                      running statistics (a debiased moving average over
                                                      collections, summed over ranks under ``torchrun``)
  L_T    = -w mean of log pi(u*_t | o_t)              ``teacher=planner``: the central scripted planner's action
                                                      u*_t on the collected steps (it sees everything; the
                                                      policy its observation: DAgger's states, learning by
                                                      cheating's teacher), w falling linearly to 0 over
                                                      ``teacher_updates``: then PPO alone takes it on

``r`` is each UAV's training reward (``env.team_weight`` mixes in the team's). Actor and critic have an
optimiser each (``networks``). Every tensor is (episodes, steps, agents, ...): no loop over agents or steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from uavgnn.algorithms.base import Network, StepOutput
from uavgnn.algorithms.env_policy import AGENT_MODELS
from uavgnn.algorithms.mappo_rollouts import MAPPOWorkload, Rollouts, TaughtRollouts, Teacher
from uavgnn.algorithms.on_policy import OnPolicy, OnPolicyConfig
from uavgnn.config.settings import env_settings, scene_distribution
from uavgnn.config.validation import AT_LEAST_1, NON_NEGATIVE, POSITIVE, UNIT, Range, ranged
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.device import unwrap
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.models.agent_stack import mlp_net
from uavgnn.models.graph_actor import GraphActor, GraphCritic
from uavgnn.problem.observation import ObservationLayout
from uavgnn.problem.scenes import SceneDistribution


@dataclass
class MAPPOSettings:
    n_agents: int
    obs_dim: int
    state_dim: int
    n_actions: int  # continuous: action dimensions; discrete, goto: actions
    continuous: bool
    hidden: int  # actor width
    layers: int  # actor hidden layers
    critic_hidden: int
    critic_layers: int
    value_norm_decay: float  # 0: no value normalisation
    graph_actor: tuple[ObservationLayout, int, int] | None = None  # (layout, heads, ffn_mult): shared GNN actor
    graph_critic: bool = False  # V_i over UAV i's observation graph and the swarm's mean (``GraphCritic``)
    target_scores: bool = False  # the graph actor's goto logits one per target slot, from its node (``GraphActor``)


class MAPPOAgents(nn.Module):
    """The shared actor, the centralised critic and the value normaliser's running statistics."""

    acting = ("actor", "log_std")  # what ``play`` reads: all of a checkpoint that ``load_env_policy`` loads

    def __init__(self, s: MAPPOSettings) -> None:
        super().__init__()
        self.s = s
        outputs = s.n_actions
        if s.graph_actor is None:
            self.actor: nn.Module = mlp_net(s.obs_dim + s.n_agents, s.hidden, s.layers, outputs)
        else:
            layout, heads, ffn_mult = s.graph_actor
            self.actor = GraphActor(layout, outputs, s.hidden, heads, s.layers, ffn_mult, s.target_scores)
        # the Gaussian's log-std per action dimension; none for categorical actions (DDP wants every parameter used)
        self.log_std = nn.Parameter(torch.zeros(s.n_actions)) if s.continuous else None
        if s.graph_critic:
            layout, heads, ffn_mult = s.graph_actor
            self.critic: nn.Module = GraphCritic(layout, s.critic_hidden, heads, s.critic_layers, ffn_mult)
        else:
            self.critic = mlp_net(s.state_dim + s.obs_dim + s.n_agents, s.critic_hidden, s.critic_layers, 1)
        self.register_buffer("return_moments", torch.zeros(3))  # weight, mean, mean of squares (debiased by weight)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def actor_parameters(self) -> list[nn.Parameter]:
        return [*self.actor.parameters(), *([] if self.log_std is None else [self.log_std])]

    def _ids(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-2]
        return torch.eye(n, device=x.device, dtype=x.dtype).expand(*x.shape[:-1], n)

    def head(self, obs: torch.Tensor, avail: torch.Tensor) -> torch.Tensor:
        """(..., N, A) the Gaussian's means, or logits with -inf on infeasible actions, for obs (..., N, obs_dim)."""
        out = self.actor(obs) if self.s.graph_actor else self.actor(torch.cat([obs, self._ids(obs)], -1))
        return out if self.s.continuous else out.masked_fill(~avail, float("-inf"))

    def log_prob(
        self, obs: torch.Tensor, avail: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(log pi(action | obs), entropy of pi(. | obs)), each (..., N)."""
        return self.scored(self.head(obs, avail), avail, action)

    def scored(self, out: torch.Tensor, avail: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``log_prob`` from the actor's ``head`` output."""
        if self.s.continuous:
            log_std = self.log_std.expand_as(out)
            z = (action - out) / log_std.exp()
            logp = (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
            return logp, (log_std + 0.5 * (1 + math.log(2 * math.pi))).sum(-1)
        logp = out.log_softmax(-1)
        entropy = -(logp.exp() * logp.masked_fill(~avail, 0.0)).sum(-1)  # 0 log 0 = 0, with finite gradients
        return logp.gather(-1, action[..., None]).squeeze(-1), entropy

    @torch.no_grad()
    def sample(
        self, obs: torch.Tensor, avail: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(E, N[, A]) an action drawn from the policy (u for continuous actions) and its log-probability."""
        out = self.head(obs, avail)
        if self.s.continuous:
            action = out + self.log_std.exp() * torch.randn(out.shape, generator=generator, device=out.device)
        else:
            probs = out.softmax(-1).flatten(0, -2)
            action = torch.multinomial(probs, 1, generator=generator).view(out.shape[:-1])
        return action, self.scored(out, avail, action)[0]

    def to_env(self, action: torch.Tensor) -> torch.Tensor:
        """What the environment flies: tanh(u) for continuous actions, the action itself otherwise."""
        return torch.tanh(action) if self.s.continuous else action

    @torch.no_grad()
    def act(self, obs: torch.Tensor, avail: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """(E, N[, A]) environment actions: sampled, or the policy's mode without a generator."""
        obs = obs.to(self.return_moments.dtype)
        if generator is not None:
            return self.to_env(self.sample(obs, avail, generator)[0])
        out = self.head(obs, avail)
        return torch.tanh(out) if self.s.continuous else out.argmax(-1)

    def play(self, env, generator: torch.Generator | None = None) -> torch.Tensor:
        """The policy as an environment policy (``uavgnn.envs.policies.Policy``)."""
        return self.act(env.observe(), env.available_actions(), generator)

    def value(self, state: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """(..., N) normalised values of every agent from the state (..., state_dim) and obs (..., N, obs_dim)
        (a graph critic reads the observations alone)."""
        if self.s.graph_critic:
            return self.critic(obs)
        inputs = torch.cat([state[..., None, :].expand(*obs.shape[:-1], state.shape[-1]), obs, self._ids(obs)], -1)
        return self.critic(inputs).squeeze(-1)

    def return_scale(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, std) of the returns seen so far: the value normaliser (0, 1 when it is off or before data)."""
        weight, mean, square = self.return_moments.unbind()
        live = weight > 0
        mean = torch.where(live, mean / weight.clamp(min=1e-12), 0.0)
        var = torch.where(live, square / weight.clamp(min=1e-12) - mean.pow(2), 1.0)
        return mean, var.clamp(min=1e-4).sqrt()

    @torch.no_grad()
    def observe_returns(self, returns: torch.Tensor, mask: torch.Tensor) -> None:
        """Move the normaliser's moments toward a collection's returns (weighted by ``mask``, summed over ranks)."""
        decay = self.s.value_norm_decay
        if decay == 0:
            return
        w = mask[..., None].expand_as(returns)
        sums = distributed.all_reduce_sum(torch.stack([w.sum(), (returns * w).sum(), (returns.pow(2) * w).sum()]))
        batch = torch.stack([torch.ones_like(sums[0]), sums[1] / sums[0].clamp(min=1), sums[2] / sums[0].clamp(min=1)])
        self.return_moments.mul_(decay).add_((1 - decay) * batch)


def mappo_loss(
    agents: MAPPOAgents, batch: Rollouts, clip: float, entropy_coef: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(actor + critic loss, stats) of a minibatch of rollouts."""
    weight = batch.mask[..., None].expand_as(batch.logp)
    count = weight.sum().clamp(min=1.0)
    mean = (batch.advantage * weight).sum() / count
    std = (((batch.advantage - mean).pow(2) * weight).sum() / count).sqrt()
    advantage = (batch.advantage - mean) / (std + 1e-8)
    out = agents.head(batch.obs, batch.avail)
    logp, entropy = agents.scored(out, batch.avail, batch.action)
    log_ratio = logp - batch.logp
    ratio = log_ratio.exp()
    surrogate = torch.minimum(ratio * advantage, ratio.clamp(1 - clip, 1 + clip) * advantage)
    actor_loss = -((surrogate + entropy_coef * entropy) * weight).sum() / count
    return_mean, return_std = agents.return_scale()
    value = agents.value(batch.state, batch.obs)
    critic_loss = ((value - (batch.returns - return_mean) / return_std).pow(2) * weight).sum() / count
    imitation = teacher_loss(out, batch, weight, count) if isinstance(batch, TaughtRollouts) else None
    with torch.no_grad():
        stats = {
            "actor_loss": actor_loss.detach(),
            "critic_loss": critic_loss.detach(),
            "entropy": (entropy * weight).sum() / count,
            "approx_kl": ((ratio - 1 - log_ratio) * weight).sum() / count,
            "clip_fraction": (((ratio - 1).abs() > clip) * weight).sum() / count,
            "value": (batch.value * weight).sum() / count,
        }
    if imitation is None:
        return actor_loss + critic_loss, stats
    return actor_loss + critic_loss + imitation, {**stats, "teacher_loss": imitation.detach()}


def teacher_loss(
    logits: torch.Tensor, batch: TaughtRollouts, weight: torch.Tensor, count: torch.Tensor
) -> torch.Tensor:
    """The weighted negative log-likelihood of the teacher's actions (those feasible for the policy)."""
    teacher = batch.teacher_action[..., None]
    feasible = batch.avail.gather(-1, teacher).squeeze(-1)
    logp = logits.log_softmax(-1).gather(-1, teacher).squeeze(-1).masked_fill(~feasible, 0.0)
    return -(logp * weight * batch.teacher_weight[:, None, None]).sum() / count


@dataclass
class MAPPOConfig(OnPolicyConfig):
    name: str = "mappo"
    gamma: float = ranged(0.99, UNIT)  # discount
    gae_lambda: float = ranged(0.95, UNIT)  # GAE's lambda (the critic's targets are the same lambda-returns)
    clip: float = ranged(0.2, Range(0, 1, low_open=True))  # the clipped objective's epsilon
    entropy_coef: float = ranged(0.01, NON_NEGATIVE)  # entropy bonus
    value_norm_decay: float = ranged(0.99, Range(0, 1, high_open=True))  # value normaliser's moving average (0: off)
    actor_lr_scale: float = ranged(1.0, POSITIVE)  # actor LR = train.lr x this
    critic_hidden: int = ranged(128, AT_LEAST_1)  # critic width
    critic_layers: int = ranged(2, AT_LEAST_1)  # critic hidden layers (a graph critic: its attention layers)
    # state: V_i(global state, o_i, id_i), an MLP whose input grows with the swarm | graph: V_i over UAV i's
    # observation graph and the swarm's mean embedding, any swarm size (with a TransformerGNN size as model)
    critic: str = "state"
    # none | planner: imitate the central scripted planner's actions on the collected steps as well (it sees
    # everything, the policy its observation; discrete or goto actions), with a weight falling to 0 |
    # planner_home: the same planner, its idle UAVs flying home (env.goto_home) | planner_home_at_rest: they fly
    # home only in the episodes whose targets do not move (env.obs_target_velocity shows it where a target is seen)
    teacher: str = "none"
    teacher_coef: float = ranged(1.0, NON_NEGATIVE)  # the imitation loss's weight at the start
    teacher_updates: int = ranged(1000, AT_LEAST_1)  # updates over which that weight falls linearly to 0
    # the teacher told the targets' motion (env.target_speed): this share of the flight to where a UAV meets a target
    # in what the pair costs it, the rest the distance now (0: it assumes targets at rest, as the central planner
    # does; uavgnn.envs.policies.MOTION_WEIGHT = 0.25, chosen on the validation episodes)
    teacher_motion_weight: float = ranged(0.0, UNIT)
    # goto actions with a graph actor: each seen target's logit scored from that target's node beside the UAV's (one
    # score per candidate, as the assignment model's edge scorer), not every logit from the UAV's node alone
    target_scores: bool = False
    data_passes: int = ranged(5, AT_LEAST_1)  # passes (PPO epochs) over each collection


class MAPPO(OnPolicy):
    """The plug-in: one loss for actor and critic, each with its optimiser; a collection every
    ``minibatches x data_passes`` updates."""

    name = "mappo"
    timed_by = "benchmarks/bench_mappo.py"
    config = MAPPOConfig
    # a shared actor (MLP with agent ids, or one graph actor for any swarm size) of any action kind; a centralised
    # value function
    capabilities = replace(
        OnPolicy.capabilities, models=AGENT_MODELS, actions=("continuous", "discrete", "goto"), centralised_critic=True
    )

    @classmethod
    def check(cls, cfg: Any) -> None:
        super().check(cfg)
        if cfg.algorithm.critic not in ("state", "graph"):
            raise ConfigError(f"algorithm.critic={cfg.algorithm.critic!r}: expected state or graph")
        if cfg.algorithm.critic == "graph" and cls.is_mlp(cfg):
            raise ConfigError(
                "algorithm.critic=graph with model=mlp: a graph critic reads observation graphs, as the graph "
                "actor does; use a TransformerGNN size (model=tiny...)"
            )
        teacher = cfg.algorithm.teacher
        if teacher not in ("none", "planner", "planner_home", "planner_home_at_rest"):
            raise ConfigError(
                f"algorithm.teacher={teacher!r}: expected none, planner, planner_home or planner_home_at_rest"
            )
        if teacher != "none" and cfg.env.action == "continuous":
            raise ConfigError(
                f"algorithm.teacher={teacher} with env.action=continuous: the planner's actions are imitated as "
                "categories; use env.action=goto or discrete"
            )
        if teacher.startswith("planner_home") and not cfg.env.goto_home:
            raise ConfigError(
                f"algorithm.teacher={teacher} without env.goto_home: its idle UAVs fly home, an action the "
                "environment has only with env.goto_home=true"
            )
        if cfg.algorithm.teacher_motion_weight > 0 and (teacher == "none" or cfg.env.target_speed <= 0):
            raise ConfigError(
                f"algorithm.teacher_motion_weight={cfg.algorithm.teacher_motion_weight} with algorithm.teacher="
                f"{teacher} and env.target_speed={cfg.env.target_speed}: it tells a teacher the targets' motion; "
                "it needs a teacher and moving targets"
            )
        if cfg.algorithm.target_scores and (cls.is_mlp(cfg) or cfg.env.action != "goto"):
            raise ConfigError(
                f"algorithm.target_scores=true with model={cfg.model.name} and env.action={cfg.env.action}: it scores "
                "the graph actor's goto actions target by target; use a TransformerGNN size and env.action=goto"
            )

    across_sizes = "a TransformerGNN size as model and algorithm.critic=graph"

    @classmethod
    def any_swarm_size(cls, cfg: Any) -> bool:
        return not cls.is_mlp(cfg) and cfg.algorithm.critic == "graph"

    @classmethod
    def build_model(cls, cfg: Any) -> MAPPOAgents:
        env, dist, alg = env_settings(cfg), scene_distribution(cfg), cfg.algorithm
        graph = None if cls.is_mlp(cfg) else (env.layout(), cfg.model.heads, cfg.model.ffn_mult)
        return MAPPOAgents(
            MAPPOSettings(
                env.n_uav,
                env.obs_dim(),
                env.state_dim(dist),
                env.action_dim(),
                env.action == "continuous",
                cfg.model.hidden,
                cfg.model.layers,
                alg.critic_hidden,
                alg.critic_layers,
                alg.value_norm_decay,
                graph,
                alg.critic == "graph",
                alg.target_scores,
            )
        )

    def __init__(self, cfg: Any, device: torch.device) -> None:
        super().__init__(cfg, device)
        # plain floats: a compiled step that read them from the config would trace OmegaConf (a graph break)
        self.clip, self.entropy_coef = float(cfg.algorithm.clip), float(cfg.algorithm.entropy_coef)

    def workload(self, model: nn.Module) -> MAPPOWorkload:
        alg = self.cfg.algorithm
        teacher = (
            None
            if alg.teacher == "none"
            else Teacher(
                alg.teacher_coef,
                alg.teacher_updates,
                idle_home=alg.teacher.startswith("planner_home"),
                at_rest=alg.teacher == "planner_home_at_rest",
                motion_weight=alg.teacher_motion_weight,
            )
        )
        return MAPPOWorkload(
            self.env_run(),
            model,
            self.device,
            self.cfg.hardware.batch_size,
            alg.minibatches,
            alg.gamma,
            alg.gae_lambda,
            teacher,
        )

    def training_step(self, model: nn.Module, batch: Rollouts, draws: None) -> StepOutput:
        loss, stats = mappo_loss(unwrap(model), batch, self.clip, self.entropy_coef)
        return StepOutput(loss, stats, batch.mask.sum() * batch.logp.shape[-1])

    def networks(self, model: nn.Module) -> list[Network]:
        agents = unwrap(model)
        return [
            Network("critic", list(agents.critic.parameters())),
            Network("actor", agents.actor_parameters(), self.cfg.algorithm.actor_lr_scale),
        ]

    @classmethod
    def self_check(cls, device: torch.device) -> bool:
        """Three steps of 8 environments of 4 UAVs (continuous actions), then one update on those episodes."""
        dist, generator = SceneDistribution(), torch.Generator(device=device).manual_seed(0)
        settings = EnvSettings(n_uav=4)
        env = UAVEnv(settings, dist, 8, device, seed=0)
        obs, state = env.reset()
        agents = MAPPOAgents(
            MAPPOSettings(4, settings.obs_dim(), settings.state_dim(dist), 2, True, 32, 2, 32, 2, 0.99)
        ).to(device)
        rows = []
        for _ in range(3):
            avail = env.available_actions()
            action, logp = agents.sample(obs, avail, generator)
            step = env.step(agents.to_env(action))
            value = agents.value(state, obs).detach()
            rows.append(
                (
                    obs,
                    state,
                    avail,
                    action,
                    step.reward,
                    step.done.float(),
                    torch.ones(8, device=device),
                    logp,
                    value,
                    step.reward - value,
                    step.reward,
                )
            )
            obs, state = step.obs, step.state
        batch = Rollouts(*(torch.stack(column, 1) for column in zip(*rows)))
        mappo_loss(agents, batch, 0.2, 0.01)[0].backward()
        return True
