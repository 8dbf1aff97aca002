"""A shared-parameter graph-Transformer actor (``algorithm=masac`` with a TransformerGNN size as ``model``).

Every UAV runs the same weights over its observation graph
(``observation_graph``): the UAV attends to the targets and UAVs it sees
through ``GraphTransformerLayer``s (PyG ``TransformerConv``'s weights with the relative
positions as edge features, run as dense attention over the graph's fixed nodes: ``dense_attention``) and a head
reads its node. One set of weights for any number of UAVs, unlike the per-agent MLP actors (``model=mlp``).
Called like ``AgentStack``: (N, B, obs_dim) in, (N, B, outputs) out.
"""

from __future__ import annotations

import torch
from torch import nn

from uavgnn.models.transformer_gnn import DenseScenes, GraphTransformerLayer, mlp
from uavgnn.problem.observation import GRAPH_EDGE_FEATURES, ObservationLayout, observation_graph


class GraphActor(nn.Module):
    """``target_scores``: the outputs are goto actions (stay, one per target slot, then any others such as home),
    and each target slot's logit comes from that target's node beside the UAV's (a score per candidate, as the
    assignment model's edge scorer gives), not from the UAV's node alone, where which slot is best is blurred into
    one attention-weighted sum."""

    def __init__(
        self,
        layout: ObservationLayout,
        outputs: int,
        hidden: int,
        heads: int,
        layers: int,
        ffn_mult: int,
        target_scores: bool = False,
    ) -> None:
        super().__init__()
        if layers < 1:
            raise ValueError(f"model.layers={layers}: the graph actor needs at least one layer to read what it sees")
        self.layout, self.outputs = layout, outputs
        self.encode = nn.Linear(layout.node_features, hidden)
        self.layers = nn.ModuleList(
            GraphTransformerLayer(hidden, heads, 0.0, ffn_mult, edge_dim=GRAPH_EDGE_FEATURES) for _ in range(layers)
        )
        self.norm = nn.LayerNorm(hidden)
        self.head = mlp([hidden, hidden, outputs - layout.obs_targets * target_scores])
        # (the UAV's embedding, a target slot's) -> that slot's logit
        self.score = mlp([2 * hidden, hidden, 1]) if target_scores else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        graph = observation_graph(obs, self.layout)
        rows, nodes, _ = graph.x.shape
        every = DenseScenes(None, graph.mask, graph.attr)
        ego = DenseScenes(None, graph.mask[:, :1], graph.attr[:, :1])  # the last layer: only the UAV's node is read
        h = self.encode(graph.x.view(rows * nodes, -1))
        for i, layer in enumerate(self.layers):
            seen = h  # every node's embedding as this layer reads it: the last one's target slots are scored
            h = layer(h, None, None, ego if i == len(self.layers) - 1 else every)
        own = self.norm(h)  # (rows, hidden): each row's UAV
        if self.score is None:
            return self.head(own).view(*obs.shape[:-1], self.outputs)
        kt = self.layout.obs_targets
        slots = self.norm(seen.view(rows, nodes, -1)[:, 1 : 1 + kt])  # (rows, kt, hidden): node 0 is the UAV
        per_target = self.score(torch.cat([own[:, None].expand(-1, kt, -1), slots], -1)).squeeze(-1)
        rest = self.head(own)  # (rows, 1 + others): stay, then the actions after the targets'
        return torch.cat([rest[:, :1], per_target, rest[:, 1:]], -1).view(*obs.shape[:-1], self.outputs)


class GraphCritic(nn.Module):
    """V_i of every UAV from its observation graph and the mean of the swarm's: the same weights for any swarm
    size (a critic over the global state grows with it and cannot follow a graph actor to larger swarms).
    (..., N, obs_dim) in, (..., N) out."""

    def __init__(self, layout: ObservationLayout, hidden: int, heads: int, layers: int, ffn_mult: int) -> None:
        super().__init__()
        self.embed = GraphActor(layout, hidden, hidden, heads, layers, ffn_mult)
        self.head = mlp([2 * hidden, hidden, 1])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        h = self.embed(obs)  # (..., N, hidden)
        swarm = h.mean(-2, keepdim=True).expand_as(h)
        return self.head(torch.cat([h, swarm], -1)).squeeze(-1)
