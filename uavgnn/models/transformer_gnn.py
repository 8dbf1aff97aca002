"""TransformerGNN: local graph attention over UAVs and targets, scoring every candidate edge.

Per-type node encoders; L pre-norm layers of PyG ``TransformerConv`` with edge
features (residual + FFN), each optionally under gradient checkpointing; an
edge scorer giving one logit per candidate UAV->target edge and an idle logit
per UAV. Every UAV of every graph in the batch is decided in one pass. A model
with ``refine_rounds`` R > 0 also reads an assignment (``assignment_features``
of the previous round's decode) through a zero-initialised linear map added to
the node embeddings (``uavgnn.inference.refinement`` runs the R + 1 rounds).
"""

from __future__ import annotations

import math
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch_geometric.nn import TransformerConv

from uavgnn.models.choices import Balancing
from uavgnn.problem.graphs import ASSIGNMENT_DIM, EDGE_DIM, NODE_DIM, RELAXATION_EDGE_DIM, RELAXATION_NODE_DIM


class MLP(nn.Sequential):
    """Linear layers and activations applied to rows: leading dimensions are flattened once for the whole stack
    (``nn.Linear`` views a (..., features) input to 2-D and back itself: two view ops a layer, and two more in
    the backward). The same numbers and the same parameter names as the plain ``nn.Sequential``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() <= 2:
            return super().forward(x)
        return super().forward(x.flatten(0, -2)).unflatten(0, x.shape[:-1])


def mlp(sizes: Sequence[int], activation: type[nn.Module] = nn.GELU) -> MLP:
    """Linear layers of the given sizes with ``activation`` between them (none after the last)."""
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), activation()]
    return MLP(*layers[:-1])


@dataclass
class DenseScenes:
    """A batch's message graph laid out scene by scene, for attention as dense masked matmuls of fixed shape.

    Node ``v`` sits in slot ``slot[v]`` of a (graphs, size) grid (None: the nodes are that grid already, as
    ``observation_graph``'s); ``mask[g, i, j]``: node j of scene g sends to node i; ``attr[g, i, j]``: that
    edge's features (any finite value where there is none: the mask blocks it). ``receivers`` = ``mask.shape[1]``
    (< size only with ``slot`` None): only the first ``receivers`` nodes of each scene are computed, the others
    being read by no one, and attention returns graphs x receivers rows."""

    slot: torch.Tensor | None  # (num_nodes,)
    mask: torch.Tensor  # (graphs, receivers, size) bool
    attr: torch.Tensor  # (graphs, receivers, size, edge features)

    def __post_init__(self) -> None:
        if self.slot is not None and self.mask.shape[1] != self.mask.shape[2]:
            raise ValueError("DenseScenes: fewer receivers than nodes needs the nodes laid out as the grid (slot None)")

    def receiving(self, h: torch.Tensor) -> torch.Tensor:
        """The rows of ``h`` (num_nodes, ...) that receive: every node, or the first ``receivers`` of each scene."""
        graphs, receivers, size = self.mask.shape
        return h if receivers == size else h.reshape(graphs, size, -1)[:, :receivers].reshape(graphs * receivers, -1)


def dense_scenes(
    graph_of: torch.Tensor,
    ptr: torch.Tensor,
    graphs: int,
    size: int,
    edge_index: torch.Tensor,
    edge_attr: torch.Tensor,
    edge_valid: torch.Tensor | None = None,
) -> DenseScenes:
    """``DenseScenes`` of a PyG batch (node -> graph ``graph_of``, graph offsets ``ptr``) whose scenes have at
    most ``size`` nodes; edges where ``edge_valid`` is False (padding) are left out. Every shape is set by
    ``graphs``, ``size`` and the edge count, none by the data: no host sync."""
    local = torch.arange(graph_of.numel(), device=graph_of.device) - ptr[graph_of]
    slot = graph_of * size + local
    src, dst = edge_index
    pair = slot[dst] * size + local[src]
    mask = torch.zeros(graphs * size * size, dtype=torch.bool, device=src.device)
    if edge_valid is None:
        mask = mask.index_fill(0, pair, True)
    else:
        mask = mask.index_put((pair,), edge_valid)
        edge_attr = torch.where(edge_valid[:, None], edge_attr, 0.0)
    attr = edge_attr.new_zeros(graphs * size * size, edge_attr.shape[1]).index_copy(0, pair, edge_attr)
    return DenseScenes(slot, mask.view(graphs, size, size), attr.view(graphs, size, size, -1))


def dense_attention(conv: TransformerConv, h: torch.Tensor, dense: DenseScenes) -> torch.Tensor:
    """``conv(h, edge_index, edge_attr)`` (concat heads, root weight, no beta) as masked attention over each
    scene's nodes: batched matmuls instead of per-edge gathers and scatters. The edge projection is applied
    to the query and to the attention-weighted edge features, never to every (i, j) pair, so the pairs
    cost ``heads x edge features``, not ``hidden``. Equals PyG's result (tests: fp64, 1e-10) at the receiving nodes:
    all of them, or the first ``receivers`` of each scene (``DenseScenes``)."""
    graphs, receivers, size = dense.mask.shape
    heads, width = conv.heads, conv.out_channels
    x = h if dense.slot is None else h.new_zeros(graphs * size, h.shape[1]).index_copy(0, dense.slot, h)
    x = x.view(graphs, size, -1)
    q = conv.lin_query(x[:, :receivers]).view(graphs, receivers, heads, width).transpose(1, 2)
    k, v = (lin(x).view(graphs, size, heads, width).transpose(1, 2) for lin in (conv.lin_key, conv.lin_value))
    w_edge = conv.lin_edge.weight.view(heads, width, -1)  # (heads, width, edge features)
    score = (q @ k.transpose(2, 3) + torch.einsum("ghie,gije->ghij", q @ w_edge, dense.attr)) / math.sqrt(width)
    blocked = ~dense.mask[:, None]
    # exp underflows to exactly 0 off the edges; a node that receives nothing gets 0 (PyG's empty sum)
    alpha = torch.softmax(score.masked_fill(blocked, torch.finfo(score.dtype).min), -1).masked_fill(blocked, 0.0)
    alpha = F.dropout(alpha, conv.dropout, conv.training)
    out = alpha @ v + torch.einsum("ghij,gije->ghie", alpha, dense.attr) @ w_edge.transpose(1, 2)
    out = out.transpose(1, 2).reshape(graphs * receivers, heads * width)
    return (out if dense.slot is None else out[dense.slot]) + conv.lin_skip(dense.receiving(h))


def drop_generated_source(layer: nn.Module) -> None:
    """PyG writes the ``propagate`` it generates for a layer class to a new file in the temp directory, imports it
    and leaves the file there: one file per process that builds a model, outside the run and cache directories.
    Imported, the module runs from memory (a traceback through it shows no source line); the file goes."""
    module = sys.modules.get(type(layer).propagate.__module__)
    path = Path(getattr(module, "__file__", None) or "")
    if path.name and path.parent == Path(tempfile.gettempdir()):
        path.unlink(missing_ok=True)


class GraphTransformerLayer(nn.Module):
    """``h + Attn(LN(h))`` then ``h + FFN(LN(h))``; attention is ``TransformerConv`` with edge features."""

    def __init__(self, hidden: int, heads: int, dropout: float, ffn_mult: int, edge_dim: int = EDGE_DIM) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"model.hidden={hidden} must be divisible by model.heads={heads}")
        self.norm_attn = nn.LayerNorm(hidden)
        # root_weight: PyG builds lin_skip either way; using it keeps no parameter idle
        self.attn = TransformerConv(hidden, hidden // heads, heads=heads, edge_dim=edge_dim, dropout=dropout)
        drop_generated_source(self.attn)
        self.norm_ffn = nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(
            nn.Linear(hidden, ffn_mult * hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(ffn_mult * hidden, hidden)
        )
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        h: torch.Tensor,
        edge_index: torch.Tensor | None,
        edge_attr: torch.Tensor | None,
        dense: DenseScenes | None = None,
    ) -> torch.Tensor:
        """With ``dense`` (the same edges laid out as ``DenseScenes``) attention runs as dense matmuls, the edge list
        is not read (None where a graph exists only dense, as ``observation_graph``'s), and the output holds the
        receiving nodes only (``DenseScenes.receiving``)."""
        hn = self.norm_attn(h)
        if dense is None:
            attended = self.attn(hn, edge_index, edge_attr)
        else:
            attended, h = dense_attention(self.attn, hn, dense), dense.receiving(h)
        h = h + self.dropout(attended)
        return h + self.dropout(self.ffn(self.norm_ffn(h)))


class TransformerGNN(nn.Module):
    """Scores (candidate edge logits (C,), idle logits (num_nodes,)) for a batch of scene graphs.

    ``checkpoint_layers`` (an attribute, set for training: ``optim.grad_checkpoint``) lists the layer indices run
    under ``torch.utils.checkpoint`` (activation memory traded for recomputation in backward); ``refine_rounds``: see
    the module docstring
    (zero-initialised, so a refining model starts as the plain one and can start from its weights);
    ``balancing``: of the deciding policy against the targets' needs, in eval mode
    (``models.choices.capacity_balanced``, applied by ``models.policy``); ``relaxation``: the node and edge
    inputs carry the linear relaxation's assignment too (``problem.graphs.relaxation_inputs``), so the model
    corrects the relaxation's rounding instead of deriving the assignment anew.
    """

    def __init__(
        self,
        hidden: int = 64,
        heads: int = 2,
        layers: int = 2,
        dropout: float = 0.0,
        ffn_mult: int = 2,
        refine_rounds: int = 0,
        balancing: Balancing = Balancing(),
        relaxation: bool = False,
    ) -> None:
        super().__init__()
        if (
            min(hidden, heads, layers, ffn_mult) < 1
            or min(refine_rounds, balancing.iters, balancing.stages) < 0
            or not 0 < balancing.fill <= 1
        ):
            raise ValueError(
                f"model: hidden, heads, layers and ffn_mult must be >= 1, refine_rounds, capacity_iters "
                f"and commit_stages >= 0, capacity_fill in (0, 1], got hidden={hidden}, heads={heads}, "
                f"layers={layers}, ffn_mult={ffn_mult}, refine_rounds={refine_rounds}, capacity_iters="
                f"{balancing.iters}, capacity_fill={balancing.fill}, commit_stages={balancing.stages}"
            )
        node_dim = NODE_DIM + RELAXATION_NODE_DIM * relaxation
        edge_dim = EDGE_DIM + RELAXATION_EDGE_DIM * relaxation
        self.uav_encoder = mlp([node_dim, hidden, hidden])
        self.target_encoder = mlp([node_dim, hidden, hidden])
        self.refine_rounds, self.balancing, self.relaxation = refine_rounds, balancing, relaxation
        if refine_rounds:
            self.assignment_encoder = nn.Linear(ASSIGNMENT_DIM, hidden)
            nn.init.zeros_(self.assignment_encoder.weight)
            nn.init.zeros_(self.assignment_encoder.bias)
        self.layers = nn.ModuleList(
            GraphTransformerLayer(hidden, heads, dropout, ffn_mult, edge_dim) for _ in range(layers)
        )
        self.checkpoint_layers: set[int] = set()
        self.final_norm = nn.LayerNorm(hidden)
        self.edge_encoder = nn.Linear(edge_dim, hidden)
        self.edge_scorer = mlp([3 * hidden, hidden, 1])
        self.idle_scorer = mlp([hidden, hidden, 1])

    def forward(
        self,
        x: torch.Tensor,
        node_type: torch.Tensor,
        edge_index: torch.Tensor,
        edge_attr: torch.Tensor,
        cand_index: torch.Tensor,
        cand_attr: torch.Tensor,
        dense: DenseScenes | None = None,
        assignment: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``dense``: the message graph laid out by ``dense_scenes`` (attention as dense matmuls, same result);
        ``assignment``: the refinement input (``assignment_features``), None in the first round."""
        h = self.embed(x, node_type, assignment)  # (num_nodes, hidden)
        for i, layer in enumerate(self.layers):
            if i in self.checkpoint_layers and self.training and torch.is_grad_enabled():
                h = checkpoint(layer, h, edge_index, edge_attr, dense, use_reentrant=False)
            else:
                h = layer(h, edge_index, edge_attr, dense)
        h = self.final_norm(h)
        src, dst = cand_index
        edge_in = torch.cat([h[src], h[dst], self.edge_encoder(cand_attr)], dim=1)  # (C, 3 * hidden)
        return self.edge_scorer(edge_in).squeeze(1), self.idle_scorer(h).squeeze(1)

    @torch.no_grad()
    def forward_chunked(
        self,
        x: torch.Tensor,
        node_type: torch.Tensor,
        edge_index: torch.Tensor,
        edge_attr: torch.Tensor,
        cand_index: torch.Tensor,
        cand_attr: torch.Tensor,
        max_edges: int = 2**20,
        assignment: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``forward`` for inference on huge scenes in bounded memory (PyG's layer-wise inference).

        Per-edge tensors dominate memory (several ``E x hidden`` buffers per layer), so each
        layer runs over groups of destination nodes holding at most ``max_edges`` incoming
        edges, as a bipartite ``TransformerConv`` call (sources -> this group), and the edge
        scorer runs over blocks of candidates. Every node still attends over all its edges,
        so the result equals ``forward``'s.
        """
        h = self.embed(x, node_type, assignment)
        order = torch.argsort(edge_index[1], stable=True)
        src, dst, attr = edge_index[0, order], edge_index[1, order], edge_attr[order]
        ptr = torch.searchsorted(dst, torch.arange(h.shape[0] + 1, device=dst.device))
        bounds = [0]
        while bounds[-1] < h.shape[0]:  # node groups of at most max_edges incoming edges (at least one node)
            end = int(torch.searchsorted(ptr, ptr[bounds[-1]] + max_edges, right=True)) - 1
            bounds.append(min(max(end, bounds[-1] + 1), h.shape[0]))
        for layer in self.layers:
            hn = layer.norm_attn(h)
            out = torch.empty_like(h)
            for a, b in zip(bounds[:-1], bounds[1:]):
                e0, e1 = int(ptr[a]), int(ptr[b])
                nodes, local = torch.unique(src[e0:e1], return_inverse=True)
                sub_index = torch.stack([local, dst[e0:e1] - a])
                out[a:b] = layer.attn((hn[nodes], hn[a:b]), sub_index, attr[e0:e1])
            h = h + out
            h = h + layer.ffn(layer.norm_ffn(h))
        h = self.final_norm(h)
        cand_logit = (
            torch.cat(
                [
                    self.edge_scorer(
                        torch.cat(
                            [
                                h[cand_index[0, i : i + max_edges]],
                                h[cand_index[1, i : i + max_edges]],
                                self.edge_encoder(cand_attr[i : i + max_edges]),
                            ],
                            dim=1,
                        )
                    ).squeeze(1)
                    for i in range(0, cand_index.shape[1], max_edges)
                ]
            )
            if cand_index.shape[1]
            else h.new_zeros(0)
        )
        return cand_logit, self.idle_scorer(h).squeeze(1)

    def embed(self, x: torch.Tensor, node_type: torch.Tensor, assignment: torch.Tensor | None) -> torch.Tensor:
        """Each node's embedding by its type's encoder, plus the encoded assignment in a refinement round."""
        h = torch.where((node_type == 0).unsqueeze(1), self.uav_encoder(x), self.target_encoder(x))
        if assignment is not None:
            if not self.refine_rounds:
                raise ValueError("an assignment input needs a model built with refine_rounds > 0")
            h = h + self.assignment_encoder(assignment.to(h.dtype))
        return h

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


@dataclass
class TransformerGNNConfig:
    """``model=tiny|small|medium|large``: the TransformerGNN's size (conf/model/<size>.yaml picks the values)."""

    options: ClassVar[tuple[str, ...]] = ("tiny", "small", "medium", "large")  # its model= options (conf/model/)

    name: str = "???"  # required (OmegaConf's MISSING): conf/model/<size>.yaml names it
    hidden: int = 64  # width of node embeddings
    heads: int = 2  # attention heads per TransformerConv layer (hidden is split across them)
    layers: int = 2  # TransformerConv layers (pre-norm, residual, FFN)
    dropout: float = 0.0  # dropout in attention and FFN
    ffn_mult: int = 2  # FFN width = ffn_mult * hidden
    refine_rounds: int = 0  # re-decide this many times, reading the previous round's greedy assignment (0: once)
    capacity_iters: int = 50  # when deciding (eval mode), balance each target's expected UAVs against its need
    #                           this many times (``models.choices.capacity_balanced``; 0: off); training sees the
    #                           plain policy: trained through, the model leans on an unconverged balancing
    capacity_fill: float = 0.65  # ... and fill a target up to its need once this share of it is expected
    #                              (1: only scale down; ``models.choices.Balancing``; 0.65: chosen on validation)
    commit_stages: int = 5  # ... and decide target by target, the surest first, in this many stages, re-balancing
    #                          what is left after each (``decoders.staged_decode``; 0 or 1: one greedy decode)
    relaxation: bool = True  # read the linear relaxation's assignment (min-cost flow) as node and edge inputs


# what a checkpoint saved before a key existed ran with (a key's default is what new runs train with)
SAVED_BEFORE = {"refine_rounds": 0, "capacity_iters": 0, "capacity_fill": 1.0, "commit_stages": 0, "relaxation": False}


def model_from_config(
    config: TransformerGNNConfig, grad_checkpoint: bool = False, checkpoint_layers: Sequence[int] | None = None
) -> TransformerGNN:
    """The network of a ``model`` group's settings; ``grad_checkpoint`` checkpoints ``checkpoint_layers``
    (every layer when None)."""
    c = config
    chosen = range(c.layers) if checkpoint_layers is None else [int(i) for i in checkpoint_layers]
    model = TransformerGNN(
        hidden=c.hidden,
        heads=c.heads,
        layers=c.layers,
        dropout=c.dropout,
        ffn_mult=c.ffn_mult,
        refine_rounds=c.refine_rounds,
        balancing=Balancing(c.capacity_iters, c.capacity_fill, c.commit_stages),
        relaxation=c.relaxation,
    )
    model.checkpoint_layers = set(chosen) if grad_checkpoint else set()
    return model
