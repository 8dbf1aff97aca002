"""The RL maths the algorithms share, each computed for every step and agent at once (no loop over time):
TD(lambda) returns (COMA's critic targets), GAE (MAPPO's advantages) and the in-place averaging of target
networks (MASAC's critics; the loop's moving average of the weights uses it too)."""

from __future__ import annotations

import torch


@torch.no_grad()
def lerp_all_(targets: list[torch.Tensor], sources: list[torch.Tensor], weight: torch.Tensor) -> None:
    """``target <- target + weight (source - target)`` for every pair in one foreach op, ``weight`` a device
    scalar (``_foreach_lerp_`` with a scalar tensor would read it on the host: a sync)."""
    torch._foreach_lerp_(targets, sources, [weight] * len(targets))


def td_lambda_targets(
    reward: torch.Tensor, done: torch.Tensor, next_q: torch.Tensor, gamma: float, lam: float
) -> torch.Tensor:
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


def gae(
    reward: torch.Tensor, done: torch.Tensor, value: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, lambda-returns), each (B, T, N), of episodes' rewards (B, T, N), ends (B, T) and values
    (B, T, N): GAE's sum of discounted TD errors is the lambda-return minus the value, and the lambda-returns
    come for every step at once (``td_lambda_targets``). No bootstrap past the last step: episodes end there."""
    next_value = torch.cat([value[:, 1:], torch.zeros_like(value[:, :1])], 1)
    returns = td_lambda_targets(reward, done, next_value, gamma, lam)
    return returns - value, returns
