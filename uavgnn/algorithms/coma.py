"""COMA: counterfactual multi-agent policy gradients, every agent and time step batched (reference/003).

A shared actor (an MLP over the agent's observation and its one-hot id;
infeasible headings masked out) and a centralised critic that, for agent a at
step t, reads the global state, the other agents' one-hot actions (a's own
block zeroed) and a's id, and returns Q for every action of a at once (the
layout of EPyMARL's ``coma_learner``). One forward of the critic covers all
agents, steps and episodes of a batch:

  G_t   = r_t + gamma (1 - done_t) [(1 - lambda) Qtarget_{t+1}(taken) + lambda G_{t+1}]     TD(lambda), per agent
  L_Q   = mean over valid steps and agents of (Q_t(taken) - G_t)^2
  A_t   = Q_t(taken) - sum_u pi(u | o_t) Q_t(u)                                              counterfactual advantage
  L_pi  = -mean of (A_t log pi(taken | o_t) + entropy_coef H(pi(. | o_t)))

The TD(lambda) recursion is solved for every step at once as a (T x T)
triangular weighting (``td_lambda_targets``), not a loop over time. ``r`` is
each UAV's training reward (``env.team_weight`` mixes in the team's), so the
critic is per agent through its id. The target critic is copied from the
critic every ``target_update_every`` updates. ``coma_naive.py`` holds the
per-agent, per-step loops this replaces; a test checks both give the same
losses and gradients.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from uavgnn.algorithms.base import Algorithm, StepOutput
from uavgnn.envs.on_policy import Episodes
from uavgnn.models.agent_stack import mlp_net
from uavgnn.runtime import unwrap


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
        return self.state_dim + self.n_agents * self.n_actions + self.n_agents


def first_layer(layer: nn.Linear, state: torch.Tensor, action: torch.Tensor, n_actions: int) -> torch.Tensor:
    """(B, T, N, H): the critic's first layer on every agent's input [state, others' one-hot actions (own block
    zeroed), own one-hot id], without building those inputs: W [s; u_-a; e_a] = W_s s + sum_{j != a} W_u[j, u_j]
    + W_id[a]. The state block runs once per step instead of once per agent, each action block once per agent
    (a batched matmul: gathers and their scatter backward are slow on the CPU) - the same numbers as the dense
    layer (``coma_naive`` uses that), a fraction of the work."""
    n = action.shape[-1]
    w_state, w_action, w_id = layer.weight.split([state.shape[-1], n * n_actions, n], dim=1)
    per_step = F.linear(state, w_state, layer.bias)  # (B, T, H)
    onehot = F.one_hot(action, n_actions).to(state.dtype)  # (B, T, N, A)
    own = torch.einsum("btna,nah->btnh", onehot, w_action.T.reshape(n, n_actions, -1))  # each agent's column
    return per_step[:, :, None] + (own.sum(2, keepdim=True) - own) + w_id.T


def td_lambda_targets(reward: torch.Tensor, done: torch.Tensor, next_q: torch.Tensor, gamma: float,
                      lam: float) -> torch.Tensor:
    """(B, T, N) TD(lambda) returns, all steps at once: G_t = sum_{k>=t} (prod_{t<=j<k} c_j) b_k with
    c_j = gamma lambda (1 - done_j) and b_k = r_k + gamma (1 - lambda)(1 - done_k) next_q_k."""
    steps = reward.shape[1]
    live = (1 - done)[..., None]  # (B, T, 1)
    b = reward + gamma * (1 - lam) * live * next_q  # (B, T, N)
    c = (gamma * lam * live).expand_as(b).transpose(1, 2)  # (B, N, T)
    upper = torch.ones(steps, steps, dtype=torch.bool, device=reward.device).triu()  # j >= t
    factors = torch.where(upper, c[..., None, :], torch.ones_like(c[..., None, :]))  # (B, N, t, j)
    through = factors.cumprod(-1)  # prod_{t <= j' <= j} c_j'
    weight = torch.cat([torch.ones_like(through[..., :1]), through[..., :-1]], -1) * upper  # prod over t..k-1
    return (weight @ b.transpose(1, 2)[..., None]).squeeze(-1).transpose(1, 2)


class COMAAgents(nn.Module):
    """The shared actor, the centralised critic and its target copy; ``forward`` is the update's loss."""

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

    def q_values(self, state: torch.Tensor, action: torch.Tensor, critic: nn.Module | None = None) -> torch.Tensor:
        """(B, T, N, A): Q of every action of every agent, the others' actions as taken (one batched call)."""
        critic = self.critic if critic is None else critic
        return critic[1:](first_layer(critic[0], state, action, self.s.n_actions))

    def forward(self, ep: Episodes) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        s = self.s
        taken = ep.action[..., None]
        q = self.q_values(ep.state, ep.action)
        q_taken = q.gather(-1, taken).squeeze(-1)  # (B, T, N)
        with torch.no_grad():
            target = self.q_values(ep.state, ep.action, self.target_critic).gather(-1, taken).squeeze(-1)
            next_q = torch.cat([target[:, 1:], torch.zeros_like(target[:, :1])], 1)
            returns = td_lambda_targets(ep.reward, ep.done, next_q, s.gamma, s.td_lambda)
        weight = ep.mask[..., None].expand_as(q_taken)
        count = weight.sum().clamp(min=1.0)
        critic_loss = ((q_taken - returns).pow(2) * weight).sum() / count

        logp = self.logits(ep.obs, ep.avail).log_softmax(-1)
        pi = logp.exp()
        baseline = (pi * q.detach()).sum(-1)  # sum_u pi(u) Q(u): the counterfactual baseline
        advantage = (q_taken.detach() - baseline).detach()
        entropy = -(pi * logp.masked_fill(~ep.avail, 0.0)).sum(-1)  # 0 log 0 = 0, with finite gradients
        logp_taken = logp.gather(-1, taken).squeeze(-1)
        actor_loss = -((advantage * logp_taken + s.entropy_coef * entropy) * weight).sum() / count
        stats = {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(),
                 "advantage_mean": (advantage * weight).sum() / count,
                 "advantage_std": ((advantage.pow(2) * weight).sum() / count).sqrt(),
                 "entropy": (entropy.detach() * weight).sum() / count, "q": (q_taken.detach() * weight).sum() / count}
        return critic_loss + actor_loss, stats

    @torch.no_grad()
    def sync_target(self) -> None:
        self.target_critic.load_state_dict(self.critic.state_dict())


class COMA(Algorithm):
    """The shared loop's view of COMA: one loss for actor and critic, a hard target update every N updates."""

    def __init__(self, target_update_every: int, actor_lr_scale: float) -> None:
        self.target_update_every, self.actor_lr_scale = target_update_every, actor_lr_scale
        self.updates = 0

    def training_step(self, model: nn.Module, batch: Episodes, k: int, step: int) -> StepOutput:
        loss, stats = model(batch)
        return StepOutput(loss, stats, batch.mask.sum() * batch.action.shape[-1])

    def param_groups(self, model: nn.Module) -> list[dict]:
        agents = unwrap(model)
        return [{"params": list(agents.critic.parameters()), "lr_scale": 1.0},
                {"params": list(agents.actor.parameters()), "lr_scale": self.actor_lr_scale}]

    def after_step(self, model: nn.Module) -> None:
        self.updates += 1
        if self.updates % self.target_update_every == 0:
            unwrap(model).sync_target()

    def state_dict(self) -> dict[str, Any]:
        return {"updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.updates = state.get("updates", 0)
