"""``algorithm=coma``: counterfactual multi-agent policy gradients, every agent and step batched (reference/003).

A shared actor (an MLP over the agent's observation and its one-hot id;
infeasible headings masked out) and a centralised critic that, for agent a at
step t, reads the global state, a's own observation, the other agents' one-hot
actions (a's own block zeroed) and a's id, and returns Q for every action of a
at once (the inputs of EPyMARL's ``coma`` critic, less the last actions). The
observation carries what a's actions mean: with ``env=goto`` action k is a's
k-th nearest open target, which the absolute positions of the state only give
after a sort the critic would have to learn. One forward of the critic covers all
agents, steps and episodes of a batch:

  G_t   = r_t + gamma (1 - done_t) [(1 - lambda) Qtarget_{t+1}(taken) + lambda G_{t+1}]     TD(lambda), per agent
  L_Q   = mean over valid steps and agents of (Q_t(taken) - G_t)^2
  A_t   = Q_t(taken) - sum_u pi(u | o_t) Q_t(u)                                              counterfactual advantage
  L_pi  = -mean of (A_t log pi(taken | o_t) + entropy_coef H(pi(. | o_t)))

The TD(lambda) recursion is solved for every step at once as a (T x T)
triangular weighting (``td_lambda_targets``), not a loop over time. ``r`` is
each UAV's training reward (``env.team_weight`` mixes in the team's), so the
critic is per agent through its id. The target critic is copied from the
critic every ``target_update_every`` updates, so the targets G_t only change
there: they are computed for a whole collection at once and again after each
target update (``TargetedWorkload``), not per minibatch. ``coma_naive.py`` holds the
per-agent, per-step loops this replaces; a test checks both give the same
losses and gradients. The data side is on-policy episodes (``EpisodeWorkload``):
one collection, then ``passes`` over it of ``minibatches`` updates each
(``cadence``); actor and critic have an optimiser each (``networks``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from uavgnn.algorithms.base import Network, StepOutput
from uavgnn.algorithms.on_policy import OnPolicy, OnPolicyConfig
from uavgnn.algorithms.rl_math import td_lambda_targets
from uavgnn.config.settings import env_settings, scene_distribution
from uavgnn.config.validation import AT_LEAST_1, NON_NEGATIVE, POSITIVE, UNIT, ranged
from uavgnn.envs.on_policy import Episodes, EpisodeWorkload
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.infrastructure.device import unwrap
from uavgnn.models.agent_stack import MLPConfig, mlp_net
from uavgnn.problem.scenes import SceneDistribution


@dataclass
class COMASettings:
    n_agents: int
    obs_dim: int
    state_dim: int
    n_actions: int
    hidden: int  # actor width
    layers: int  # actor hidden layers
    critic_hidden: int
    critic_layers: int
    gamma: float
    td_lambda: float
    entropy_coef: float

    def critic_inputs(self) -> int:
        return self.state_dim + self.obs_dim + self.n_agents * self.n_actions + self.n_agents


def first_layer(
    layer: nn.Linear, state: torch.Tensor, obs: torch.Tensor, action: torch.Tensor, n_actions: int
) -> torch.Tensor:
    """(B, T, N, H): the critic's first layer on every agent's input [state, own observation, others' one-hot
    actions (own block zeroed), own one-hot id], without building those inputs: W [s; o_a; u_-a; e_a] = W_s s
    + W_o o_a + sum_{j != a} W_u[j, u_j] + W_id[a]. The state block runs once per step instead of once per
    agent, each action block once per agent (a batched matmul: gathers and their scatter backward are slow on
    the CPU) - the same numbers as the dense layer (``coma_naive`` uses that), a fraction of the work."""
    n = action.shape[-1]
    w_state, w_obs, w_action, w_id = layer.weight.split([state.shape[-1], obs.shape[-1], n * n_actions, n], dim=1)
    per_step = F.linear(state, w_state, layer.bias)  # (B, T, H)
    by_agent = action.flatten(0, 1).T[..., None]  # (N, B x T, 1): agent-major, so each agent's block is one matmul
    onehot = (by_agent == torch.arange(n_actions, device=action.device)).to(state.dtype)  # (N, B x T, A)
    own = torch.bmm(onehot, w_action.view(-1, n, n_actions).permute(1, 2, 0))  # (N, B x T, H): W_u[a, u_a]
    others = (own.sum(0) - own).transpose(0, 1).unflatten(0, action.shape[:2])  # (B, T, N, H), a view
    return per_step[:, :, None] + F.linear(obs, w_obs) + others + w_id.T


class COMAAgents(nn.Module):
    """The shared actor, the centralised critic and its target copy."""

    acting = ("actor",)  # what ``play`` reads: all of a checkpoint that ``load_env_policy`` loads

    def __init__(self, s: COMASettings) -> None:
        super().__init__()
        self.s = s
        self.actor = mlp_net(s.obs_dim + s.n_agents, s.hidden, s.layers, s.n_actions)
        self.critic = mlp_net(s.critic_inputs(), s.critic_hidden, s.critic_layers, s.n_actions)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def logits(self, obs: torch.Tensor, avail: torch.Tensor) -> torch.Tensor:
        """(..., N, A) action logits, -inf on infeasible actions, for observations (..., N, obs_dim)."""
        n = obs.shape[-2]
        ids = torch.eye(n, device=obs.device, dtype=obs.dtype).expand(*obs.shape[:-1], n)
        return self.actor(torch.cat([obs, ids], -1)).masked_fill(~avail, float("-inf"))

    @torch.no_grad()
    def act(self, obs: torch.Tensor, avail: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """(E, N) actions: sampled from the policy, or its most likely action without a generator."""
        logits = self.logits(obs.to(next(self.actor.parameters()).dtype), avail)
        if generator is None:
            return logits.argmax(-1)
        probs = logits.softmax(-1).flatten(0, -2)
        return torch.multinomial(probs, 1, generator=generator).view(logits.shape[:-1])

    def play(self, env, generator: torch.Generator | None = None) -> torch.Tensor:
        """The policy as an environment policy (``uavgnn.envs.policies.Policy``)."""
        return self.act(env.observe(), env.available_actions(), generator)

    def q_values(
        self, state: torch.Tensor, obs: torch.Tensor, action: torch.Tensor, critic: nn.Module | None = None
    ) -> torch.Tensor:
        """(B, T, N, A): Q of every action of every agent, the others' actions as taken (one batched call)."""
        critic = self.critic if critic is None else critic
        return critic[1:](first_layer(critic[0], state, obs, action, self.s.n_actions))

    @torch.no_grad()
    def sync_target(self) -> None:
        self.target_critic.load_state_dict(self.critic.state_dict())
        self.target_updates += 1

    target_updates = 0  # syncs so far in this process: what the workload's cached targets were computed after


@torch.no_grad()
def critic_targets(agents: COMAAgents, ep: Episodes) -> torch.Tensor:
    """(B, T, N) the critic's TD(lambda) targets: the target critic's Q of the actions taken, bootstrapped."""
    s = agents.s
    target = agents.q_values(ep.state, ep.obs, ep.action, agents.target_critic).gather(-1, ep.action[..., None])
    target = target.squeeze(-1)
    next_q = torch.cat([target[:, 1:], torch.zeros_like(target[:, :1])], 1)
    return td_lambda_targets(ep.reward, ep.done, next_q, s.gamma, s.td_lambda)


def coma_loss(
    agents: COMAAgents, ep: Episodes, returns: torch.Tensor | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(actor + critic loss, stats) of a batch of episodes, against the critic's ``returns`` (``critic_targets``
    of the batch, computed here when not given)."""
    s, n = agents.s, ep.action.shape[-1]
    taken = ep.action[..., None]
    q = agents.q_values(ep.state, ep.obs, ep.action)
    q_taken = q.gather(-1, taken).squeeze(-1)  # (B, T, N)
    returns = critic_targets(agents, ep) if returns is None else returns
    logp = agents.logits(ep.obs, ep.avail).log_softmax(-1)
    pi = logp.exp()
    with torch.no_grad():  # the advantage is a constant of both losses' gradients (no_grad: no detach op per input)
        advantage = q_taken - (pi * q).sum(-1)  # minus sum_u pi(u) Q(u): the counterfactual baseline
    entropy = -(pi * logp.masked_fill(~ep.avail, 0.0)).sum(-1)  # 0 log 0 = 0, with finite gradients
    critic = (q_taken - returns).pow(2)  # (B, T, N) each loss's terms, averaged over the valid steps together
    actor = -(advantage * logp.gather(-1, taken).squeeze(-1) + s.entropy_coef * entropy)
    weight = (ep.mask / (ep.mask.sum() * n).clamp(min=1.0))[..., None]  # (B, T, 1): 1 / valid (step, agent)s
    with torch.no_grad():  # the statistics in one reduction
        means = (torch.stack([critic, actor, advantage, advantage.pow(2), entropy, q_taken]) * weight).sum((1, 2, 3))
    critic_loss, actor_loss, mean, square, entropy_mean, q_mean = means.unbind()
    stats = {
        "critic_loss": critic_loss,
        "actor_loss": actor_loss,
        "advantage_mean": mean,
        "advantage_std": square.sqrt(),
        "entropy": entropy_mean,
        "q": q_mean,
    }
    return ((critic + actor) * weight).sum(), stats


@dataclass
class TargetedEpisodes(Episodes):
    """A minibatch of episodes with the critic's targets."""

    returns: torch.Tensor  # (B, T, N) critic_targets


class TargetedWorkload(EpisodeWorkload):
    """Episodes with the critic's targets, computed for the whole collection when it is collected and again after
    each target update, not once per minibatch: the target critic only changes there, so the values are those of
    each minibatch's own (tested), and an update runs the critic forward once, not twice."""

    targets: torch.Tensor | None = None  # critic_targets of the collection
    targets_after: int = -1  # the target updates they were computed after

    def batch(self, step: int, stage: int, batch_size: int) -> TargetedEpisodes:
        ids, agents = self.minibatch_ids(step), unwrap(self.model)
        if self.targets is None or self.targets_after != agents.target_updates:
            self.targets, self.targets_after = critic_targets(agents, self.episodes), agents.target_updates
        return TargetedEpisodes(**self.episodes.index(ids).state_dict(), returns=self.targets[ids])

    def finish(self, columns: dict[str, torch.Tensor]) -> Episodes:
        self.targets = None  # a new collection
        return super().finish(columns)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.targets = None  # resume or rollback: the weights and the episodes are the saved ones
        super().load_state_dict(state)


@dataclass
class COMAConfig(OnPolicyConfig):
    name: str = "coma"
    gamma: float = ranged(0.99, UNIT)  # discount
    td_lambda: float = ranged(0.8, UNIT)  # TD(lambda) targets of the critic
    entropy_coef: float = ranged(0.001, NON_NEGATIVE)  # entropy bonus (EPyMARL's coma: 0.001)
    target_update_every: int = ranged(200, AT_LEAST_1)  # hard copy of the critic into its target, every N updates
    actor_lr_scale: float = ranged(1.0, POSITIVE)  # actor LR = train.lr x this
    critic_grad_clip: Optional[float] = ranged(None, POSITIVE)  # max gradient norm of the critic (null: train's)
    actor_grad_clip: Optional[float] = ranged(None, POSITIVE)  # max gradient norm of the actor (null: train's)
    critic_hidden: int = ranged(128, AT_LEAST_1)  # centralised critic width
    critic_layers: int = ranged(2, AT_LEAST_1)  # centralised critic hidden layers
    minibatches: int = ranged(5, AT_LEAST_1)  # minibatches of hardware.batch_size episodes per collection


class COMA(OnPolicy):
    """The plug-in: one loss for actor and critic, a hard target update every ``target_update_every`` updates."""

    name = "coma"
    timed_by = "benchmarks/bench_coma.py"
    config = COMAConfig
    # one shared MLP actor over discrete choices (headings or targets), a centralised critic
    capabilities = replace(
        OnPolicy.capabilities, models={"mlp": MLPConfig}, actions=("discrete", "goto"), centralised_critic=True
    )

    @classmethod
    def build_model(cls, cfg: Any) -> COMAAgents:
        env, dist, alg = env_settings(cfg), scene_distribution(cfg), cfg.algorithm
        return COMAAgents(
            COMASettings(
                env.n_uav,
                env.obs_dim(),
                env.state_dim(dist),
                env.action_dim(),
                cfg.model.hidden,
                cfg.model.layers,
                alg.critic_hidden,
                alg.critic_layers,
                alg.gamma,
                alg.td_lambda,
                alg.entropy_coef,
            )
        )

    def __init__(self, cfg: Any, device: torch.device) -> None:
        super().__init__(cfg, device)
        self.updates = 0

    def workload(self, model: nn.Module) -> TargetedWorkload:
        return TargetedWorkload(
            self.env_run(), model, self.device, self.cfg.hardware.batch_size, self.cfg.algorithm.minibatches
        )

    def training_step(self, model: nn.Module, batch: TargetedEpisodes, draws: None) -> StepOutput:
        loss, stats = coma_loss(unwrap(model), batch, batch.returns)
        return StepOutput(loss, stats, batch.mask.sum() * batch.action.shape[-1])

    def networks(self, model: nn.Module) -> list[Network]:
        agents = unwrap(model)
        alg = self.cfg.algorithm
        return [
            Network("critic", list(agents.critic.parameters()), 1.0, alg.critic_grad_clip),
            Network("actor", list(agents.actor.parameters()), alg.actor_lr_scale, alg.actor_grad_clip),
        ]

    def after_step(self, model: nn.Module, applied: torch.Tensor) -> None:
        """The target critic copies the critic every ``target_update_every`` updates (a skipped one counts)."""
        self.updates += 1
        if self.updates % self.cfg.algorithm.target_update_every == 0:
            unwrap(model).sync_target()

    @classmethod
    def self_check(cls, device: torch.device) -> bool:
        """Three steps of 8 environments of 4 UAVs (discrete actions), then one update on those episodes."""
        dist, generator = SceneDistribution(), torch.Generator(device=device).manual_seed(0)
        settings = EnvSettings(n_uav=4, action="discrete")
        env = UAVEnv(settings, dist, 8, device, seed=0)
        obs, state = env.reset()
        agents = COMAAgents(
            COMASettings(
                4, settings.obs_dim(), settings.state_dim(dist), settings.action_dim(), 32, 2, 32, 2, 0.99, 0.8, 0.001
            )
        ).to(device)
        rows = []
        for _ in range(3):
            avail = env.available_actions()
            action = agents.act(obs, avail, generator)
            step = env.step(action)
            rows.append((obs, state, avail, action, step.reward, step.done.float(), torch.ones(8, device=device)))
            obs, state = step.obs, step.state
        coma_loss(agents, Episodes(*(torch.stack(column, 1) for column in zip(*rows))))[0].backward()
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.updates = state.get("updates", 0)
