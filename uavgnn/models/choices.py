"""Each UAV's choice distribution: softmax over {idle} + its kept candidate edges.

Shared by the imitation loss, the decoders and the sampling decoder, so the
policy has one definition. All ops are scatters over the whole batch.
"""

from __future__ import annotations

import torch


def choice_log_probs(cand_logit: torch.Tensor, idle_logit: torch.Tensor, cand_uav: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities (C,) of candidate edges and (num_nodes,) of idling, per-UAV normalised."""
    cand_logit, idle_logit = cand_logit.float(), idle_logit.float()
    peak = idle_logit.detach().scatter_reduce(0, cand_uav, cand_logit.detach(), reduce="amax", include_self=True)
    total = torch.exp(idle_logit - peak).index_add(0, cand_uav, torch.exp(cand_logit - peak[cand_uav]))
    lse = peak + torch.log(total)
    return cand_logit - lse[cand_uav], idle_logit - lse


def best_choice(cand_logp: torch.Tensor, idle_logp: torch.Tensor, cand_uav: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per node: the best candidate edge (index into C, -1 if none) and whether it beats idling."""
    n = idle_logp.numel()
    best = torch.full((n,), float("-inf"), device=idle_logp.device).scatter_reduce(
        0, cand_uav, cand_logp, reduce="amax", include_self=True)
    is_best = cand_logp == best[cand_uav]
    edge = torch.full((n,), -1, dtype=torch.long, device=idle_logp.device)
    edge.scatter_reduce_(0, cand_uav[is_best], torch.nonzero(is_best).squeeze(1), reduce="amax", include_self=True)
    return edge, best > idle_logp


def imitation_loss(cand_logp: torch.Tensor, idle_logp: torch.Tensor, cand_uav: torch.Tensor,
                   cand_label: torch.Tensor, busy: torch.Tensor, is_uav: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Negative log-likelihood of the MILP's choices, mean over covered UAVs.

    A busy UAV whose labelled target fell outside its k candidates this batch
    is not covered (nothing in reach to imitate) and is left out.
    Returns (loss, accuracy of the argmax choice, number of covered UAVs).
    """
    label_logp = torch.zeros_like(idle_logp).index_add(0, cand_uav[cand_label], cand_logp[cand_label])
    has_label = torch.zeros_like(busy).index_fill(0, cand_uav[cand_label], True)
    covered = is_uav & (~busy | has_label)
    target_logp = torch.where(busy, label_logp, idle_logp)[covered]
    edge, goes = best_choice(cand_logp.detach(), idle_logp.detach(), cand_uav)
    picked_label = torch.zeros_like(busy)
    picked_label[edge >= 0] = cand_label[edge[edge >= 0]]
    correct = torch.where(busy, goes & picked_label, ~goes)[covered]
    n = covered.sum()
    return -target_logp.mean(), correct.float().mean(), n


def policy_entropy(cand_logp: torch.Tensor, idle_logp: torch.Tensor, cand_uav: torch.Tensor,
                   is_uav: torch.Tensor) -> torch.Tensor:
    """Mean over UAVs of the entropy of each UAV's choice (idle or one of its candidates), in nats: how far
    from deterministic the sampled rollouts are, which is what REINFORCE's entropy bonus keeps up."""
    plogp = torch.zeros_like(idle_logp).index_add(0, cand_uav, cand_logp.exp() * cand_logp)
    return -(plogp + idle_logp.exp() * idle_logp)[is_uav].mean()
