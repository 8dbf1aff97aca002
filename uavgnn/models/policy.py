"""The policy a model defines on a batch: each UAV's log-probabilities of idling or taking a candidate."""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.data import Batch

from uavgnn.models.choices import choice_log_probs
from uavgnn.problem.graphs import message_edges


def policy_log_probs(model: nn.Module, batch: Batch, k: int, max_edges: int | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Candidate and idle log-probabilities of a batch at candidate budget ``k``, plus the kept candidates'
    indices.
    With ``max_edges`` (inference), graphs with more message edges run layer-wise in bounded memory."""
    edge_index, edge_attr, keep = message_edges(batch, k)
    args = (batch.x, batch.node_type, edge_index, edge_attr, batch.cand_index[:, keep], batch.cand_attr[keep])
    if max_edges is not None and edge_index.shape[1] > max_edges:
        cand_logit, idle_logit = model.forward_chunked(*args, max_edges=max_edges)
    else:
        cand_logit, idle_logit = model(*args)
    cand_logp, idle_logp = choice_log_probs(cand_logit, idle_logit, batch.cand_index[0, keep])
    return cand_logp, idle_logp, keep
