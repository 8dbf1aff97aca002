"""COMA the way a first implementation loops: per agent and per step (the reference ``coma.py`` replaces).

The same losses as ``coma_loss`` - the critic evaluated agent by
agent on inputs built per agent, the counterfactual baseline per agent, and
the TD(lambda) returns by the backward recursion over time, step by step -
kept for the equivalence test and as the "before" of
``benchmarks/bench_coma.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from uavgnn.algorithms.coma import COMAAgents
from uavgnn.envs.on_policy import Episodes


def naive_loss(agents: COMAAgents, ep: Episodes) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    s = agents.s
    b, steps, n = ep.action.shape
    critic_sum = actor_sum = ep.reward.new_zeros(())
    count = ep.mask.sum().clamp(min=1.0) * n
    for a in range(n):
        others = F.one_hot(ep.action, s.n_actions).to(ep.state.dtype).clone()  # (B, T, N, A)
        others[:, :, a] = 0.0
        agent_id = torch.zeros(b, steps, n, dtype=ep.state.dtype, device=ep.state.device)
        agent_id[..., a] = 1.0
        inputs = torch.cat([ep.state, ep.obs[:, :, a], others.flatten(-2), agent_id], -1)
        q = agents.critic(inputs)  # (B, T, A)
        taken = ep.action[..., a : a + 1]
        q_taken = q.gather(-1, taken).squeeze(-1)
        with torch.no_grad():
            target = agents.target_critic(inputs).gather(-1, taken).squeeze(-1)  # (B, T)
            returns = torch.zeros_like(target)
            following = torch.zeros(b, dtype=target.dtype, device=target.device)
            for t in reversed(range(steps)):
                live = 1 - ep.done[:, t]
                next_q = target[:, t + 1] if t + 1 < steps else torch.zeros_like(following)
                following = ep.reward[:, t, a] + s.gamma * live * ((1 - s.td_lambda) * next_q + s.td_lambda * following)
                returns[:, t] = following
        critic_sum = critic_sum + ((q_taken - returns).pow(2) * ep.mask).sum()

        obs = torch.cat([ep.obs[:, :, a], agent_id], -1)
        logits = agents.actor(obs).masked_fill(~ep.avail[:, :, a], float("-inf"))
        logp = logits.log_softmax(-1)
        pi = logp.exp()
        baseline = torch.zeros_like(q_taken)
        for u in range(s.n_actions):
            baseline = baseline + pi[..., u].detach() * q[..., u].detach()
        advantage = q_taken.detach() - baseline
        entropy = -(pi * logp.masked_fill(~ep.avail[:, :, a], 0.0)).sum(-1)
        logp_taken = logp.gather(-1, taken).squeeze(-1)
        actor_sum = actor_sum - ((advantage * logp_taken + s.entropy_coef * entropy) * ep.mask).sum()
    critic_loss, actor_loss = critic_sum / count, actor_sum / count
    return critic_loss + actor_loss, {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach()}
