"""The policy a model defines on a batch: each UAV's log-probabilities of idling or taking a candidate."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from torch_geometric.data import Batch

from uavgnn.infrastructure.device import unwrap
from uavgnn.models.choices import Balancing, capacity_balanced, choice_log_probs
from uavgnn.models.transformer_gnn import DenseScenes, dense_scenes
from uavgnn.problem.graphs import message_edges, relaxation_inputs


@dataclass
class MessageGraph:
    """What a forward pass of a batch at one candidate budget reads, assembled once (a refining model's rounds
    share it): the model's positional inputs, the dense layout or None, which candidates are real (padding: None
    when all are), the kept candidates' indices and whether the inputs end with a sink node (``message_graph``)."""

    args: tuple[torch.Tensor, ...]
    dense: DenseScenes | None
    cand_valid: torch.Tensor | None
    keep: torch.Tensor
    sink: bool = False


def message_graph(batch: Batch, k: int, dense_max_nodes: int = 0, relaxation: bool = False) -> MessageGraph:
    """The ``MessageGraph`` of a batch at budget ``k``: a batch whose scenes have at most ``dense_max_nodes`` nodes
    (``batch.max_nodes``, known on the host) attends by dense masked matmuls (``dense_scenes``: fixed shapes, no host
    sync, the same result); otherwise PyG's sparse path runs. There a padded batch's padding edges all point at one
    sink node appended to the inputs, whose output is dropped: no node of the batch receives them, and the edges
    keep their number (leaving them out by a mask would make the host wait for the count on a GPU). With
    ``relaxation`` (a model that reads it) the relaxation's assignment is appended to the node and candidate
    features (``relaxation_inputs``)."""
    x, cand_attr, cand_extra = batch.x, batch.cand_attr, None
    if relaxation:
        node_extra, cand_extra = relaxation_inputs(batch)
        x, cand_attr = torch.cat([x, node_extra], 1), torch.cat([cand_attr, cand_extra], 1)
    edge_index, edge_attr, keep, edge_valid = message_edges(batch, k, cand_extra)
    dense, size, node_type, sink = None, getattr(batch, "max_nodes", None), batch.node_type, False
    if size is not None and size <= dense_max_nodes:
        dense = dense_scenes(batch.batch, batch.ptr, batch.num_graphs, size, edge_index, edge_attr, edge_valid)
    elif edge_valid is not None:
        edge_index = torch.where(edge_valid, edge_index, x.shape[0])
        x, node_type = torch.cat([x, x.new_zeros(1, x.shape[1])]), torch.cat([node_type, node_type[:1]])
        sink = True
    args = (x, node_type, edge_index, edge_attr, batch.cand_index[:, keep], cand_attr[keep])
    # edge_valid's first entries: the kept candidates' own (message_edges' order)
    return MessageGraph(args, dense, None if edge_valid is None else edge_valid[: keep.numel()], keep, sink)


def graph_log_probs(
    model: nn.Module,
    batch: Batch,
    graph: MessageGraph,
    max_edges: int | None = None,
    assignment: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``policy_log_probs`` on an assembled ``MessageGraph``."""
    cand_logit, idle_logit = graph_logits(model, graph, max_edges, assignment)
    return (*decided_log_probs(model, cand_logit, idle_logit, graph.args[4], batch.need), graph.keep)


def graph_logits(
    model: nn.Module, graph: MessageGraph, max_edges: int | None = None, assignment: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward's logits of the kept candidates (padding: -inf) and of idling at every node; with
    ``max_edges``, a graph of more message edges runs layer-wise in bounded memory (``forward_chunked``)."""
    if graph.sink and assignment is not None:
        assignment = torch.cat([assignment, assignment[:1]])  # the sink's row: its output is dropped
    if max_edges is not None and graph.args[2].shape[1] > max_edges:
        cand_logit, idle_logit = model.forward_chunked(*graph.args, max_edges=max_edges, assignment=assignment)
    else:
        given = {"dense": graph.dense, "assignment": assignment}  # passed only when set: a plain forward(*args) works
        cand_logit, idle_logit = model(*graph.args, **{key: value for key, value in given.items() if value is not None})
    if graph.sink:
        idle_logit = idle_logit[:-1]
    if graph.cand_valid is not None:
        cand_logit = cand_logit.masked_fill(~graph.cand_valid, float("-inf"))
    return cand_logit, idle_logit


def decided_log_probs(
    model: nn.Module, cand_logit: torch.Tensor, idle_logit: torch.Tensor, cand_index: torch.Tensor, need: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The policy of a forward's logits over the candidates ``cand_index`` (UAV node, target node): each UAV's
    softmax, balanced against the targets' ``need`` when the model decides (evaluation; trained plain:
    ``model.capacity_iters``)."""
    cand_logp, idle_logp = choice_log_probs(cand_logit, idle_logit, cand_index[0])
    balanced = balancing_of(model)
    if balanced.iters and not model.training:
        cand_logp, idle_logp = capacity_balanced(cand_logp, idle_logp, cand_index[0], cand_index[1], need, balanced)
    return cand_logp, idle_logp


def policy_log_probs(
    model: nn.Module,
    batch: Batch,
    k: int,
    max_edges: int | None = None,
    dense_max_nodes: int = 0,
    assignment: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Candidate and idle log-probabilities of a batch at candidate budget ``k``, plus the kept candidates'
    indices; padding candidates (``cand_valid`` False) get probability 0. ``dense_max_nodes``: see
    ``message_graph``. With ``max_edges`` (inference), graphs with more message edges run layer-wise in bounded
    memory. ``assignment``: a refinement round's input (``uavgnn.inference.refinement``)."""
    return graph_log_probs(
        model, batch, message_graph(batch, k, dense_max_nodes, reads_relaxation(model)), max_edges, assignment
    )


def reads_relaxation(model: nn.Module) -> bool:
    """Whether ``model`` reads the linear relaxation's assignment (``model.relaxation``; saved before it: no)."""
    return getattr(unwrap(model), "relaxation", False)


def balancing_of(model: nn.Module) -> Balancing:
    """How ``model`` decides (``Balancing``; a model without the setting: the plain policy, one greedy decode)."""
    return getattr(unwrap(model), "balancing", Balancing())


@contextmanager
def deciding_with(model: nn.Module, balancing: Balancing) -> Iterator[nn.Module]:
    """``model`` deciding with ``balancing`` inside (``Balancing()``: the plain policy, the test table's
    ``unbalanced`` row), its own back after."""
    inner = unwrap(model)
    own, inner.balancing = getattr(inner, "balancing", Balancing()), balancing
    try:
        yield model
    finally:
        inner.balancing = own
