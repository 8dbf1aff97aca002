"""What a UAV observes, and the same as a batched PyG graph: each UAV with the targets and UAVs it sees.

The layout of the fixed-size observation is the contract between the environment that fills it
(``UAVEnv.observe``) and the networks that read it (``GraphActor``), so it lives here, below both.
The graph is built from that observation, so the replay
buffer stores one tensor per UAV and a graph actor rebuilds its graphs on the
fly: one node per UAV (its own features), one per seen target and per seen
neighbour, edges from each seen entity to the UAV carrying their relative
position. Absent slots (fewer open targets than ``obs_targets``) get no edge.
Node features share one width: each type's features, zero-padded, plus a
one-hot of the type.
"""

from __future__ import annotations

import torch
from torch_geometric.data import Data

SELF_FEATURES, SEEN_TARGET_FEATURES, NEIGHBOUR_FEATURES = 6, 7, 5  # per UAV: its own, per seen target, per seen UAV
NODE_TYPES = 3  # the UAV itself, a seen target, a seen UAV
GRAPH_NODE_FEATURES = max(SELF_FEATURES, SEEN_TARGET_FEATURES, NEIGHBOUR_FEATURES) + NODE_TYPES
GRAPH_EDGE_FEATURES = 2  # relative position (x, y) of the seen entity, in square sides


def observation_graph(obs: torch.Tensor, obs_targets: int, obs_uavs: int) -> Data:
    """One graph over every observation row of ``obs`` (..., obs_dim); ``ego`` indexes each row's UAV node."""
    x = obs.reshape(-1, obs.shape[-1])
    rows, k = x.shape[0], obs_targets + obs_uavs
    own = x[:, :SELF_FEATURES]
    targets = x[:, SELF_FEATURES : SELF_FEATURES + SEEN_TARGET_FEATURES * obs_targets].view(rows, obs_targets, -1)
    uavs = x[:, SELF_FEATURES + SEEN_TARGET_FEATURES * obs_targets :].view(rows, obs_uavs, NEIGHBOUR_FEATURES)

    def node(features: torch.Tensor, kind: int) -> torch.Tensor:
        pad = GRAPH_NODE_FEATURES - NODE_TYPES - features.shape[-1]
        onehot = features.new_zeros(*features.shape[:-1], NODE_TYPES)
        onehot[..., kind] = 1.0
        return torch.cat([features, features.new_zeros(*features.shape[:-1], pad), onehot], -1)

    nodes = torch.cat([node(own, 0)[:, None], node(targets, 1), node(uavs, 2)], 1)  # (rows, 1 + k, F)
    present = torch.cat([targets[..., -1], uavs[..., -1]], 1) > 0  # (rows, k): the observation's present flags
    ego = torch.arange(rows, device=x.device) * (k + 1)
    src = (ego[:, None] + 1 + torch.arange(k, device=x.device))[present]
    dst = ego[:, None].expand(rows, k)[present]
    relative = torch.cat([targets[..., :2], uavs[..., :2]], 1)[present]
    return Data(
        x=nodes.reshape(-1, GRAPH_NODE_FEATURES),
        edge_index=torch.stack([src, dst]),
        edge_attr=relative,
        ego=ego,
        num_nodes=rows * (k + 1),
    )
