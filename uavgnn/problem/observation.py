"""What a UAV observes, and the same as a graph: each UAV with the targets and UAVs it sees.

The layout of the fixed-size observation is the contract between the environment that fills it
(``UAVEnv.observe``) and the networks that read it (``GraphActor``), so it lives here, below both.
The graph is built from that observation, so the replay
buffer stores one tensor per UAV and a graph actor rebuilds its graphs on the
fly: node 0 the UAV (its own features), then one per target slot and per
neighbour slot, edges from each seen entity to the UAV carrying their relative
position; an absent slot (fewer open targets than ``obs_targets``, a neighbour not heard) sends and receives nothing.
With ``links`` (``env.obs_links``) each seen UAV also points at each seen target (the target's offset from it), so
that a second layer can read which neighbour is nearer to which target.
Every row's graph has the same 1 + obs_targets + obs_uavs nodes, so it is laid out dense (which node sends to
which, and the edge's features): static shapes, attention as batched matmuls, and building it reads nothing back
from the device. Node features share one width: each type's features, zero-padded, plus a one-hot of the type.
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
    """The graph of ``observation_graph``, row by row: node 0 is the row's UAV, then its target slots, then its
    neighbour slots; a plain tuple, not a PyG ``Data`` (whose attribute setters ``torch.compile`` cannot trace)."""

    x: torch.Tensor  # (rows, nodes, ObservationLayout.node_features)
    mask: torch.Tensor  # (rows, nodes, nodes) bool: mask[r, i, j], node j sends to node i
    attr: torch.Tensor  # (rows, nodes, nodes, GRAPH_EDGE_FEATURES): that edge's relative position (masked where none)


def observation_graph(obs: torch.Tensor, layout: ObservationLayout) -> ObservationGraph:
    """One graph for each observation row of ``obs`` (..., obs_dim), laid out dense (``ObservationGraph``)."""
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
    mask = present.new_zeros(rows, 1 + k, 1 + k)
    attr = x.new_zeros(rows, 1 + k, 1 + k, GRAPH_EDGE_FEATURES)
    mask[:, 0, 1:] = present  # each seen entity -> the UAV, carrying its offset from the UAV
    attr[:, 0, 1:] = torch.cat([targets[..., :2], uavs[..., :2]], 1)
    if layout.links:  # each seen UAV -> each seen target, carrying the target's offset from that UAV
        into_targets = (slice(None), slice(1, 1 + obs_targets), slice(1 + obs_targets, None))  # (rows, kt, ku)
        mask[into_targets] = present[:, :obs_targets, None] & present[:, None, obs_targets:]
        attr[into_targets] = targets[:, :, None, :2] - uavs[:, None, :, :2]
    return ObservationGraph(nodes, mask, attr)
