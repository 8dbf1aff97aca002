"""The MASAC update as reference/002 found it: Python loops over agents, kept as the baseline to beat and the
oracle of the equivalence test.

Per agent i: every actor is evaluated on the next observations for i's
target (n_agents^2 actor calls per update), then again on the current ones
for i's actor loss; critic i, actor i and alpha i each get their own backward
and optimiser step. ``update(apply=False)`` computes the same losses at fixed
weights and leaves the gradients in place (nothing stepped), which is what
``masac_loss`` must match.
"""

from __future__ import annotations

import torch
from torch import nn

from uavgnn.algorithms.masac import MASACAgents, squash
from uavgnn.envs.replay import Transitions


class NaiveMASAC:
    """Unstacked copies of a ``MASACAgents``' networks, updated agent by agent."""

    def __init__(self, agents: MASACAgents, lr: float = 3e-4) -> None:
        s = agents.s
        self.s, self.n, self.target_entropy = s, s.n_agents, agents.target_entropy
        self.actors = [agents.actors.module(i) for i in range(self.n)]
        self.critics = [agents.critics.module(i) for i in range(2 * self.n)]  # agent i: 2i and 2i + 1
        self.targets = [agents.critics.module(i) for i in range(2 * self.n)]
        with torch.no_grad():
            for i, target in enumerate(self.targets):
                for name, w in zip(agents.critics.names, agents.targets()):
                    target.get_parameter(name).copy_(w[i])
        self.log_alpha = [nn.Parameter(agents.log_alpha[i].detach().clone()) for i in range(self.n)]
        self.optimizers = (
            [torch.optim.Adam(a.parameters(), lr) for a in self.actors]
            + [
                torch.optim.Adam([*self.critics[2 * i].parameters(), *self.critics[2 * i + 1].parameters()], lr)
                for i in range(self.n)
            ]
            + [torch.optim.Adam([a], lr) for a in self.log_alpha]
        )

    def sample(self, j: int, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.actors[j](obs).chunk(2, dim=-1)
        return squash(mean, log_std, noise)

    def update(
        self, batch: Transitions, noise: torch.Tensor, next_noise: torch.Tensor, apply: bool = True
    ) -> dict[str, float]:
        """One update; returns the summed losses. ``apply=False``: gradients only, no zeroing, no step."""
        n, gamma = self.n, self.s.gamma
        actor_opt, critic_opt, alpha_opt = self.optimizers[:n], self.optimizers[n : 2 * n], self.optimizers[2 * n :]
        totals = {"critic_loss": 0.0, "actor_loss": 0.0, "alpha_loss": 0.0}
        for i in range(n):
            alpha = self.log_alpha[i].exp().detach()
            with torch.no_grad():
                nexts = [self.sample(j, batch.next_obs[:, j], next_noise[j]) for j in range(n)]
                joint_next = torch.cat([a for a, _ in nexts], 1)
                x_next = torch.cat([batch.next_state, batch.next_obs[:, i], joint_next], -1)
                q_next = torch.minimum(self.targets[2 * i](x_next), self.targets[2 * i + 1](x_next)).squeeze(-1)
                y = batch.reward[:, i] + gamma * (1 - batch.done) * (q_next - alpha * nexts[i][1])
            x = torch.cat([batch.state, batch.obs[:, i], batch.action.flatten(1)], -1)
            critic_loss = sum(
                (batch.weight * (self.critics[2 * i + k](x).squeeze(-1) - y).pow(2)).mean() for k in range(2)
            )
            self._minimise(critic_loss, critic_opt[i], apply)

            actions = []
            for j in range(n):
                if j == i:
                    action, logp = self.sample(j, batch.obs[:, j], noise[j])
                else:
                    with torch.no_grad():
                        action, _ = self.sample(j, batch.obs[:, j], noise[j])
                actions.append(action)
            x_pi = torch.cat([batch.state, batch.obs[:, i], *actions], -1)
            for k in range(2):
                self.critics[2 * i + k].requires_grad_(False)
            q_pi = torch.minimum(self.critics[2 * i](x_pi), self.critics[2 * i + 1](x_pi)).squeeze(-1)
            for k in range(2):
                self.critics[2 * i + k].requires_grad_(True)
            actor_loss = (alpha * logp - q_pi).mean()
            self._minimise(actor_loss, actor_opt[i], apply)
            alpha_loss = -(self.log_alpha[i] * (logp.detach() + self.target_entropy)).mean()
            self._minimise(alpha_loss, alpha_opt[i], apply)
            for name, loss in (("critic_loss", critic_loss), ("actor_loss", actor_loss), ("alpha_loss", alpha_loss)):
                totals[name] += float(loss.detach())
        return totals

    @staticmethod
    def _minimise(loss: torch.Tensor, optimizer: torch.optim.Optimizer, apply: bool) -> None:
        if apply:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if apply:
            optimizer.step()
