"""Each UAV's choice distribution: softmax over {idle} + its kept candidate edges.

Shared by the imitation loss, the decoders and the sampling decoder, so the
policy has one definition. All ops are scatters over the whole batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def group_logsumexp(values: torch.Tensor, group: torch.Tensor, init: torch.Tensor) -> torch.Tensor:
    """Per node: log(exp(init) + the sum of exp(values) of its group), shifted by the group's peak (``init``
    finite: no group is empty)."""
    with torch.no_grad():  # the shift is a constant of the gradient (no_grad: no detach op per input)
        peak = init.scatter_reduce(0, group, values, reduce="amax", include_self=True)
    return peak + torch.log(torch.exp(init - peak).index_add(0, group, torch.exp(values - peak[group])))


def choice_log_probs(
    cand_logit: torch.Tensor, idle_logit: torch.Tensor, cand_uav: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities (C,) of candidate edges and (num_nodes,) of idling, per-UAV normalised."""
    cand_logit, idle_logit = cand_logit.float(), idle_logit.float()
    lse = group_logsumexp(cand_logit, cand_uav, idle_logit)
    return cand_logit - lse[cand_uav], idle_logit - lse


TARGET_FLOOR = -30.0  # log of the mass every target is given to start from (e^-30: nothing, but never empty)


@dataclass(frozen=True)
class Balancing:
    """How the deciding policy is balanced against the targets' needs (``capacity_balanced``): ``iters`` rounds
    (``model.capacity_iters``; 0: the plain policy) and the share of its need from which a target is filled up
    to it (``model.capacity_fill``; 1: targets are only ever scaled down); and in how many ``stages`` the
    decision is made, the surest targets first, the rest re-balanced after each (``model.commit_stages``;
    ``decoders.staged_decode``; 0 or 1: one greedy decode)."""

    iters: int = 0
    fill: float = 1.0
    stages: int = 0


def capacity_balanced(
    cand_logp: torch.Tensor,
    idle_logp: torch.Tensor,
    cand_uav: torch.Tensor,
    cand_target: torch.Tensor,
    need: torch.Tensor,
    balancing: Balancing,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The UAVs' choices balanced against the targets' needs, Sinkhorn's way: ``balancing.iters`` times, each
    target's expected number of UAVs (the sum of its candidates' probabilities) is scaled to its need where it is
    above it - or, from ``balancing.fill`` of the need on, below it - then each UAV's choice renormalised.
    Independent softmaxes send too many UAVs to a popular target and too few to the one beside it, more often the
    larger the scene; balancing moves the excess to each UAV's next choice, and fills a target most of whose
    need is already on its way from the UAVs' idling and other choices: towards all or nothing, as a target pays.
    It uses nothing but the policy and the needs (not a repair pass: no distance, no value)."""
    log_need = torch.log(need.float().clamp(min=1))  # UAV nodes: no candidate points at them
    log_fill = math.log(balancing.fill)  # <= 0: a target at or above its need is always scaled
    floor = torch.full_like(idle_logp, TARGET_FLOOR)
    for _ in range(balancing.iters):
        ratio = group_logsumexp(cand_logp, cand_target, floor) - log_need  # log(expected UAVs / need)
        scale = ratio.masked_fill(ratio <= log_fill, 0.0) if log_fill < 0 else ratio.clamp(min=0)
        cand_logp, idle_logp = choice_log_probs(cand_logp - scale[cand_target], idle_logp, cand_uav)
    return cand_logp, idle_logp


def best_choice(
    cand_logp: torch.Tensor, idle_logp: torch.Tensor, cand_uav: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per node: the best candidate edge (index into C, -1 if none) and whether it beats idling."""
    n = idle_logp.numel()
    best = torch.full((n,), float("-inf"), device=idle_logp.device).scatter_reduce(
        0, cand_uav, cand_logp, reduce="amax", include_self=True
    )
    edge_index = torch.arange(cand_logp.numel(), device=idle_logp.device)
    best_edge = torch.where(cand_logp == best[cand_uav], edge_index, -1)  # masked, not selected: no host sync
    edge = torch.full((n,), -1, dtype=torch.long, device=idle_logp.device)
    edge.scatter_reduce_(0, cand_uav, best_edge, reduce="amax", include_self=True)
    return edge, best > idle_logp


def imitation_loss(
    cand_logp: torch.Tensor,
    idle_logp: torch.Tensor,
    cand_uav: torch.Tensor,
    cand_label: torch.Tensor,
    busy: torch.Tensor,
    is_uav: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Negative log-likelihood of the MILP's choices, mean over covered UAVs.

    A busy UAV whose labelled target fell outside its k candidates this batch
    is not covered (nothing in reach to imitate) and is left out.
    Returns (loss, accuracy of the argmax choice, number of covered UAVs).
    """
    label_logp = torch.zeros_like(idle_logp).index_add(0, cand_uav, torch.where(cand_label, cand_logp, 0.0))
    # counted in floats: CUDA's index_add on bools keeps one write (the CPU's is an 'or')
    has_label = torch.zeros_like(idle_logp).index_add(0, cand_uav, cand_label.to(idle_logp.dtype)) > 0
    covered = is_uav & (~busy | has_label)
    n = covered.sum()
    target_logp = masked_mean(torch.where(busy, label_logp, idle_logp), covered, n)
    with torch.no_grad():  # the accuracy: a statistic
        edge, goes = best_choice(cand_logp, idle_logp, cand_uav)
        picked_label = (edge >= 0) & cand_label[edge.clamp(min=0)] if cand_label.numel() else torch.zeros_like(busy)
        correct = masked_mean(torch.where(busy, goes & picked_label, ~goes).float(), covered, n)
    return -target_logp, correct, n


def masked_mean(values: torch.Tensor, mask: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """The mean of ``values`` where ``mask`` (``count`` of them; NaN when none), with fixed shapes: no host
    read of how many there are."""
    return torch.where(mask, values, 0.0).sum() / count


def policy_entropy(
    cand_logp: torch.Tensor, idle_logp: torch.Tensor, cand_uav: torch.Tensor, is_uav: torch.Tensor
) -> torch.Tensor:
    """Mean over UAVs of the entropy of each UAV's choice (idle or one of its candidates), in nats: how far
    from deterministic the sampled rollouts are, which is what REINFORCE's entropy bonus keeps up."""
    possible = cand_logp > float("-inf")  # p log p = 0 at p = 0 (padding): no inf or NaN, forward or backward
    safe = cand_logp.masked_fill(~possible, 0.0)
    plogp = torch.zeros_like(idle_logp).index_add(0, cand_uav, torch.where(possible, safe.exp() * safe, 0.0))
    return -masked_mean(plogp + idle_logp.exp() * idle_logp, is_uav, is_uav.sum())
