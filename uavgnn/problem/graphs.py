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
from dataclasses import dataclass

import numpy as np
import torch
from scipy.spatial import cKDTree
from torch_geometric.data import Data

from uavgnn.problem.metrics import IDLE
from uavgnn.problem.scenes import Scene, feasible_pairs

FEATURE_SET = "rel-v2"  # bump when features change: part of the cache key
NODE_DIM = 6  # [is_uav, is_target, f0, f1, f2, f3]
EDGE_DIM = 7  # [cand, cand_reverse, uav_uav, f0, f1, f2, f3]
RANGE_SCALE = 5.0
NEED_SCALE = 3.0
VALUE_SCALE = 2.0
VALUE_COLUMN = 3  # target feature: value / need / VALUE_SCALE (rewards are computed back from it)
COST_COLUMN = 6  # candidate feature: lam * dist / (value / need), the travel cost per unit of slot value


def adaptive_k(n_uav: int, k_min: int = 4, k_divisor: int = 4, k_max: int = 16) -> int:
    """DESIGN §2: ``k = min(max(k_min, ceil(N / k_divisor)), k_max)``."""
    return min(max(k_min, math.ceil(n_uav / k_divisor)), k_max)


@dataclass(frozen=True)
class GraphSettings:
    """How a scene's graph is built and truncated: the adaptive-k rule and the UAV neighbours per UAV.

    Saved in every checkpoint (``graph``), so evaluation and solving build the graphs the model was
    trained on, whatever the current config says."""

    k_min: int = 8
    k_divisor: int = 4
    k_max: int = 16
    uav_neighbours: int = 8

    def k(self, n_uav: int) -> int:
        """The candidates per UAV at inference for scenes of ``n_uav`` UAVs (training jitters it)."""
        return adaptive_k(n_uav, self.k_min, self.k_divisor, self.k_max)

    @classmethod
    def from_config(cls, data) -> "GraphSettings":
        return cls(data.k_min, data.k_divisor, data.k_max, data.uav_neighbours)


@dataclass
class Neighbours:
    """The geometric part of a graph: candidates (sorted by UAV, then distance), feasibility
    counts and UAV<->UAV neighbours. Built by a k-d tree (CPU) or ``torch.cdist`` + ``topk`` (GPU)."""

    c_uav: np.ndarray
    c_tgt: np.ndarray
    c_dist: np.ndarray
    c_rank: np.ndarray
    n_feasible: np.ndarray  # (N,) feasible targets per UAV, before truncation to k_max
    n_reach: np.ndarray  # (M,) UAVs that can reach each target
    nearest: np.ndarray  # (N,) distance to the nearest feasible target (inf if none)
    uu_src: np.ndarray
    uu_dst: np.ndarray
    uu_dist: np.ndarray


def kdtree_neighbours(scene: Scene, k_max: int, uav_neighbours: int) -> Neighbours:
    n, m = scene.n_uav, scene.n_target
    pairs = feasible_pairs(scene)  # sorted by UAV, then distance
    first = np.searchsorted(pairs.uav, np.arange(n + 1))
    rank = np.arange(len(pairs.uav)) - first[pairs.uav]
    n_feasible = np.diff(first)
    nearest = np.full(n, np.inf)
    nearest[n_feasible > 0] = pairs.dist[first[:-1][n_feasible > 0]]
    keep = rank < k_max
    n_nb = min(uav_neighbours, n - 1)
    if n_nb > 0:
        nb_dist, nb = cKDTree(scene.uav_pos).query(scene.uav_pos, k=n_nb + 1)
        src, dst, d = np.repeat(np.arange(n), n_nb), nb[:, 1:].reshape(-1), nb_dist[:, 1:].reshape(-1)
    else:
        src = dst = np.zeros(0, dtype=np.int64)
        d = np.zeros(0)
    return Neighbours(pairs.uav[keep], pairs.target[keep], pairs.dist[keep], rank[keep], n_feasible,
                      np.bincount(pairs.target, minlength=m), nearest, src, dst, d)


def torch_neighbours(scene: Scene, k_max: int, uav_neighbours: int, device: torch.device | str = "cuda",
                     block: int = 4096) -> Neighbours:
    """Same as ``kdtree_neighbours`` with ``torch.cdist`` + ``topk`` over blocks of UAVs
    (memory ``block x max(N, M)``), for building graphs on the GPU."""
    n, m = scene.n_uav, scene.n_target
    dtype = torch.float32 if torch.device(device).type == "cuda" else torch.float64
    uav = torch.as_tensor(scene.uav_pos, dtype=dtype, device=device)
    tgt = torch.as_tensor(scene.target_pos, dtype=dtype, device=device)
    rng = torch.as_tensor(scene.uav_range, dtype=dtype, device=device)
    n_nb = min(uav_neighbours, n - 1)
    parts: dict[str, list[torch.Tensor]] = {k: [] for k in ("c_uav", "c_tgt", "c_dist", "c_rank", "n_feasible",
                                                            "nearest", "uu_dst", "uu_dist")}
    n_reach = torch.zeros(m, dtype=torch.long, device=device)
    for start in range(0, n, block):
        rows = torch.arange(start, min(n, start + block), device=device)
        d = torch.cdist(uav[rows], tgt)  # (b, M)
        feasible = d <= rng[rows, None]
        n_reach += feasible.sum(0)
        parts["n_feasible"].append(feasible.sum(1))
        dist, idx = torch.topk(d.masked_fill(~feasible, float("inf")), min(k_max, m), dim=1, largest=False)
        ok = torch.isfinite(dist)
        parts["nearest"].append(dist[:, 0])
        parts["c_uav"].append(rows[:, None].expand_as(idx)[ok])
        parts["c_tgt"].append(idx[ok])
        parts["c_dist"].append(dist[ok])
        parts["c_rank"].append(torch.arange(idx.shape[1], device=device).expand_as(idx)[ok])
        if n_nb > 0:
            du = torch.cdist(uav[rows], uav)
            du[torch.arange(len(rows), device=device), rows] = float("inf")  # not my own neighbour
            nb_dist, nb = torch.topk(du, n_nb, dim=1, largest=False)
            parts["uu_dst"].append(nb.reshape(-1))
            parts["uu_dist"].append(nb_dist.reshape(-1))
    out = {k: (torch.cat(v).cpu().numpy() if v else np.zeros(0)) for k, v in parts.items()}
    src = np.repeat(np.arange(n), n_nb) if n_nb > 0 else np.zeros(0, dtype=np.int64)
    return Neighbours(out["c_uav"].astype(np.int64), out["c_tgt"].astype(np.int64), out["c_dist"].astype(np.float64),
                      out["c_rank"].astype(np.int64), out["n_feasible"].astype(np.int64), n_reach.cpu().numpy(),
                      out["nearest"].astype(np.float64), src, out["uu_dst"].astype(np.int64),
                      out["uu_dist"].astype(np.float64))


def build_graph(scene: Scene, k_max: int = 16, uav_neighbours: int = 8, assignment: np.ndarray | None = None,
                device: torch.device | str = "cpu") -> Data:
    """One scene's graph; ``assignment`` (the MILP labels) adds ``cand_label``/``busy``.
    Neighbours come from a k-d tree on CPU, from ``torch.cdist`` + ``topk`` when ``device`` is a GPU."""
    if torch.device(device).type == "cpu":
        nb = kdtree_neighbours(scene, k_max, uav_neighbours)
    else:
        nb = torch_neighbours(scene, k_max, uav_neighbours, device)
    return graph_from_neighbours(scene, nb, assignment)


def graph_from_neighbours(scene: Scene, nb: Neighbours, assignment: np.ndarray | None = None) -> Data:
    """Features and labels of a scene's graph once its neighbours are known."""
    n, m = scene.n_uav, scene.n_target
    c_uav, c_tgt, c_dist, c_rank = nb.c_uav, nb.c_tgt, nb.c_dist, nb.c_rank
    n_feasible, n_reach = nb.n_feasible, nb.n_reach
    r = scene.uav_range
    nearest = np.minimum(nb.nearest / r, 1.0)
    uav_x = np.stack([np.ones(n), np.zeros(n), r / RANGE_SCALE, np.log1p(n_feasible) / 3.0, nearest,
                      np.full(n, scene.lam)], axis=1)
    tgt_x = np.stack([np.zeros(m), np.ones(m), scene.need / NEED_SCALE, scene.value / scene.need / VALUE_SCALE,
                      np.log1p(n_reach) / 3.0, np.minimum(n_reach / scene.need, 4.0) / 4.0], axis=1)

    delta = (scene.target_pos[c_tgt] - scene.uav_pos[c_uav]) / r[c_uav, None]
    cost = scene.lam * c_dist / (scene.value[c_tgt] / scene.need[c_tgt])  # travel cost vs value per UAV slot
    cand_attr = np.column_stack([np.ones(len(c_uav)), np.zeros((len(c_uav), 2)), delta, c_dist / r[c_uav], cost])

    src, dst, d = nb.uu_src, nb.uu_dst, nb.uu_dist
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
