"""Scene -> PyG graph, with relative features only (DESIGN §2 "Graph").

We use one homogeneous ``Data`` per scene (UAV nodes first, then targets,
``node_type`` 0/1) rather than ``HeteroData``: every layer is then a single
``TransformerConv`` call over all edges (edge type is a one-hot in the edge
features), which is one sparse kernel instead of a ``HeteroConv`` loop over
three edge types, and batching/caching stay plain tensors. Per-type node
encoders still see their own feature columns.

Stored per graph (PyG offsets every ``*_index`` attribute when batching):

- ``x`` (N+M, NODE_DIM), ``node_type`` (N+M,), ``need`` (N+M,) (0 for UAVs)
- ``cand_index`` (2, C): UAV node -> target node, the ``k_max`` nearest
  *feasible* targets of each UAV, sorted by distance; ``cand_rank`` (C,) is
  the position in that order so a batch keeps ``cand_rank < k`` (cheap
  truncation to the jittered k, no rebuild); ``cand_attr`` (C, EDGE_DIM);
  ``cand_target`` (C,) the target's index within its scene (for decoding).
- ``uu_index`` (2, U), ``uu_attr``: UAV -> its nearest UAVs.
- labels: ``cand_label`` (C,) True on the MILP's chosen pair,
  ``busy`` (N+M,) True for UAVs the MILP assigns.

Features: displacements and distances are divided by the UAV's range, counts
are log-scaled, need/value by fixed constants; no absolute position anywhere,
so the graph is translation invariant and independent of the scene's size.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.spatial import cKDTree
from torch_geometric.data import Data

from uavgnn.metrics import IDLE
from uavgnn.scenes import Scene, feasible_pairs

FEATURE_SET = "rel-v2"  # bump when features change: part of the cache key
NODE_DIM = 6  # [is_uav, is_target, f0, f1, f2, f3]
EDGE_DIM = 7  # [cand, cand_reverse, uav_uav, f0, f1, f2, f3]
RANGE_SCALE = 5.0
NEED_SCALE = 3.0
VALUE_SCALE = 2.0


def adaptive_k(n_uav: int, k_min: int = 4, k_divisor: int = 4, k_max: int = 16) -> int:
    """DESIGN §2: ``k = min(max(k_min, ceil(N / k_divisor)), k_max)``."""
    return min(max(k_min, math.ceil(n_uav / k_divisor)), k_max)


def build_graph(scene: Scene, k_max: int = 16, uav_neighbours: int = 8,
                assignment: np.ndarray | None = None) -> Data:
    """One scene's graph; ``assignment`` (the MILP labels) adds ``cand_label``/``busy``."""
    n, m = scene.n_uav, scene.n_target
    pairs = feasible_pairs(scene)  # sorted by UAV, then distance
    first = np.searchsorted(pairs.uav, np.arange(n + 1))
    rank = np.arange(len(pairs.uav)) - first[pairs.uav]
    n_feasible = np.diff(first)
    n_reach = np.bincount(pairs.target, minlength=m)
    keep = rank < k_max
    c_uav, c_tgt, c_dist, c_rank = pairs.uav[keep], pairs.target[keep], pairs.dist[keep], rank[keep]

    r = scene.uav_range
    nearest = np.ones(n)
    has = n_feasible > 0
    nearest[has] = pairs.dist[first[:-1][has]] / r[has]
    uav_x = np.stack([np.ones(n), np.zeros(n), r / RANGE_SCALE, np.log1p(n_feasible) / 3.0, nearest,
                      np.full(n, scene.lam)], axis=1)
    tgt_x = np.stack([np.zeros(m), np.ones(m), scene.need / NEED_SCALE, scene.value / scene.need / VALUE_SCALE,
                      np.log1p(n_reach) / 3.0, np.minimum(n_reach / scene.need, 4.0) / 4.0], axis=1)

    delta = (scene.target_pos[c_tgt] - scene.uav_pos[c_uav]) / r[c_uav, None]
    cost = scene.lam * c_dist / (scene.value[c_tgt] / scene.need[c_tgt])  # travel cost vs value per UAV slot
    cand_attr = np.column_stack([np.ones(len(c_uav)), np.zeros((len(c_uav), 2)), delta, c_dist / r[c_uav], cost])

    n_nb = min(uav_neighbours, n - 1)
    if n_nb > 0:
        nb_dist, nb = cKDTree(scene.uav_pos).query(scene.uav_pos, k=n_nb + 1)
        src = np.repeat(np.arange(n), n_nb)
        dst, d = nb[:, 1:].reshape(-1), nb_dist[:, 1:].reshape(-1)
    else:
        src = dst = np.zeros(0, dtype=np.int64)
        d = np.zeros(0)
    uu_delta = (scene.uav_pos[dst] - scene.uav_pos[src]) / r[src, None]
    uu_attr = np.column_stack([np.zeros((len(src), 2)), np.ones(len(src)), uu_delta, d / r[src], r[dst] / r[src]])

    graph = Data(
        x=torch.from_numpy(np.concatenate([uav_x, tgt_x])).float(),
        node_type=torch.cat([torch.zeros(n, dtype=torch.long), torch.ones(m, dtype=torch.long)]),
        need=torch.cat([torch.zeros(n, dtype=torch.long), torch.from_numpy(scene.need).long()]),
        cand_index=torch.from_numpy(np.stack([c_uav, n + c_tgt])).long(),
        cand_attr=torch.from_numpy(cand_attr).float(),
        cand_rank=torch.from_numpy(c_rank).long(),
        cand_target=torch.from_numpy(c_tgt).long(),
        uu_index=torch.from_numpy(np.stack([src, dst])).long(),
        uu_attr=torch.from_numpy(uu_attr).float(),
        num_nodes=n + m,
    )
    if assignment is not None:
        graph.cand_label = torch.from_numpy(assignment[c_uav] == c_tgt)
        graph.busy = torch.from_numpy(np.concatenate([assignment != IDLE, np.zeros(m, dtype=bool)]))
    return graph


def message_edges(batch: Data, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Truncate candidates to rank < k and assemble the message-passing graph.

    Returns ``edge_index`` (2, E), ``edge_attr`` (E, EDGE_DIM) with candidate
    edges in both directions plus UAV<->UAV edges, and the boolean mask of
    kept candidates (C,).
    """
    keep = batch.cand_rank < k
    cand_index = batch.cand_index[:, keep]
    cand_attr = batch.cand_attr[keep]
    reverse_attr = torch.cat([cand_attr[:, 1:2], cand_attr[:, 0:1], cand_attr[:, 2:3], -cand_attr[:, 3:5],
                              cand_attr[:, 5:]], dim=1)
    edge_index = torch.cat([cand_index, cand_index.flip(0), batch.uu_index], dim=1)
    edge_attr = torch.cat([cand_attr, reverse_attr, batch.uu_attr], dim=0)
    return edge_index, edge_attr, keep


def candidate_recall(graphs: list[Data], k: int) -> float:
    """Fraction of MILP-assigned (UAV, target) pairs inside each UAV's k candidates."""
    assigned = sum(int(g.busy.sum()) for g in graphs)
    covered = sum(int((g.cand_label & (g.cand_rank < k)).sum()) for g in graphs)
    return covered / assigned if assigned else 1.0
