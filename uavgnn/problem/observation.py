"""What a UAV observes, and the same as a batched PyG graph: each UAV with the targets and UAVs it sees.

The layout of the fixed-size observation is the contract between the environment that fills it
(``UAVEnv.observe``) and the networks that read it (``GraphActor``), so it lives here, below both.
The graph is built from that observation, so the replay
buffer stores one tensor per UAV and a graph actor rebuilds its graphs on the
fly: one node per UAV (its own features), one per seen target and per seen
neighbour, edges from each seen entity to the UAV carrying their relative
position. An absent slot's edge (fewer open targets than ``obs_targets``, a neighbour not heard) is a loop on its
own node instead, which no UAV reads (no edge leaves an absent slot for a UAV): every graph of a shape has the same
edges, and building it reads nothing back from the device (a mask's selection would, three times a forward).
With ``links`` (``env.obs_links``) each seen UAV also points at each seen target (the target's offset from it), so
that a second layer can read which neighbour is nearer to which target; a pair with an absent end loops on it.
Node features share one width: each type's features, zero-padded, plus a
one-hot of the type.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

SELF_FEATURES, SEEN_TARGET_FEATURES, NEIGHBOUR_FEATURES = 6, 7, 5  # per UAV: its own, per seen target, per seen UAV
HOME_FEATURES = 2  # the offset (x, y) to where the UAV started, with ``env.goto_home``
TARGET_VELOCITY_FEATURES = 2  # a seen target's velocity (x, y), with ``env.obs_target_velocity``
NODE_TYPES = 3  # the UAV itself, a seen target, a seen UAV
GRAPH_EDGE_FEATURES = 2  # relative position (x, y) of the seen entity, in square sides


class ObservationLayout(NamedTuple):
    """How many targets and UAVs a UAV observes, and the width of its own features and of a seen target's (the way
    home and the targets' velocities are optional, so the networks' widths follow the environment's settings)."""

    obs_targets: int
    obs_uavs: int
    self_features: int = SELF_FEATURES
    target_features: int = SEEN_TARGET_FEATURES
    links: bool = False  # each seen UAV -> each seen target as well (``observation_graph``)

    @property
    def obs_dim(self) -> int:
        """The width of the flat observation, what an MLP actor and the replay buffers are sized by."""
        return self.self_features + self.target_features * self.obs_targets + NEIGHBOUR_FEATURES * self.obs_uavs

    @property
    def node_features(self) -> int:
        """The width of every node of ``observation_graph``: the widest type's features plus the type's one-hot."""
        return max(self.self_features, self.target_features, NEIGHBOUR_FEATURES) + NODE_TYPES


class ObservationGraph(NamedTuple):
    """The graph of ``observation_graph``, in PyG's layout; a plain tuple, not a PyG ``Data`` (whose attribute
    setters ``torch.compile`` cannot trace: a graph break a forward)."""

    x: torch.Tensor  # (num_nodes, ObservationLayout.node_features)
    edge_index: torch.Tensor  # (2, rows * k), and rows * kt * ku more with links: source, destination
    edge_attr: torch.Tensor  # (edges, GRAPH_EDGE_FEATURES)
    ego: torch.Tensor  # (rows,) each row's UAV node

    @property
    def num_nodes(self) -> int:
        return self.x.shape[0]


def observation_graph(obs: torch.Tensor, layout: ObservationLayout) -> ObservationGraph:
    """One graph over every observation row of ``obs`` (..., obs_dim); ``ego`` indexes each row's UAV node."""
    x = obs.reshape(-1, obs.shape[-1])
    obs_targets, obs_uavs, own_width, target_width = layout[:4]
    rows, k, seen = x.shape[0], obs_targets + obs_uavs, own_width + target_width * obs_targets
    own = x[:, :own_width]
    targets = x[:, own_width:seen].view(rows, obs_targets, target_width)
    uavs = x[:, seen:].view(rows, obs_uavs, NEIGHBOUR_FEATURES)

    def node(features: torch.Tensor, kind: int) -> torch.Tensor:
        pad = layout.node_features - NODE_TYPES - features.shape[-1]
        onehot = features.new_zeros(*features.shape[:-1], NODE_TYPES)
        onehot[..., kind] = 1.0
        return torch.cat([features, features.new_zeros(*features.shape[:-1], pad), onehot], -1)

    nodes = torch.cat([node(own, 0)[:, None], node(targets, 1), node(uavs, 2)], 1)  # (rows, 1 + k, F)
    present = torch.cat([targets[..., -1], uavs[..., -1]], 1) > 0  # (rows, k): the observation's present flags
    ego = torch.arange(rows, device=x.device) * (k + 1)
    src = ego[:, None] + 1 + torch.arange(k, device=x.device)
    dst = torch.where(present, ego[:, None], src)  # an absent slot: a loop on its own node
    edge_index = torch.stack([src.reshape(-1), dst.reshape(-1)])
    relative = torch.cat([targets[..., :2], uavs[..., :2]], 1).reshape(-1, GRAPH_EDGE_FEATURES)
    if layout.links:  # each seen UAV -> each seen target, carrying the target's offset from that UAV
        target_node = src[:, None, :obs_targets].expand(-1, obs_uavs, -1)  # (rows, ku, kt)
        uav_node = src[:, obs_targets:, None].expand(-1, -1, obs_targets)
        target_seen, uav_seen = present[:, None, :obs_targets], present[:, obs_targets:, None]
        loop = torch.where(target_seen, uav_node, target_node)  # a pair with an absent end: a loop on that end
        both = target_seen & uav_seen
        pairs = torch.stack(
            [torch.where(both, uav_node, loop).reshape(-1), torch.where(both, target_node, loop).reshape(-1)]
        )
        edge_index = torch.cat([edge_index, pairs], 1)
        offset = targets[:, None, :, :2] - uavs[:, :, None, :2]
        relative = torch.cat([relative, offset.reshape(-1, GRAPH_EDGE_FEATURES)])
    return ObservationGraph(nodes.reshape(-1, layout.node_features), edge_index, relative, ego)
