"""The naive reference pipeline, kept only to measure what the optimized one buys (``mode=benchmark``).

What a first implementation does: every ``__getitem__`` rebuilds the scene's
graph from the raw scene, normalising that sample's features on the fly and
scoring its candidate edges with a Python loop over UAVs (distances to every
target and UAV, sort, keep the k nearest feasible); PyG's ``DataLoader``
collates graph by graph; nothing is cached, so every epoch pays it again.
It builds exactly the graph of ``uavgnn.problem.graphs.build_graph`` (a test checks
that the model gives the same logits on both), so any speed difference is
the pipeline's, not the model's.
"""

from __future__ import annotations

import numpy as np
from torch.utils.data import Dataset
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

from uavgnn.problem.graphs import graph_from_neighbours
from uavgnn.problem.neighbours import Neighbours
from uavgnn.problem.scenes import Scene
from uavgnn.solvers.min_cost_flow import relax_candidates


def loop_neighbours(scene: Scene, k_max: int, uav_neighbours: int) -> Neighbours:
    """Candidate edges and UAV neighbours, one UAV at a time."""
    n, m = scene.n_uav, scene.n_target
    c_uav, c_tgt, c_dist, c_rank, uu_src, uu_dst, uu_dist = ([] for _ in range(7))
    n_feasible = np.zeros(n, dtype=np.int64)
    n_reach = np.zeros(m, dtype=np.int64)
    nearest = np.full(n, np.inf)
    n_nb = min(uav_neighbours, n - 1)
    for u in range(n):
        d = np.sqrt(((scene.target_pos - scene.uav_pos[u]) ** 2).sum(axis=1))
        feasible = np.flatnonzero(d <= scene.uav_range[u])
        order = feasible[np.argsort(d[feasible], kind="stable")]
        n_feasible[u] = len(order)
        n_reach[order] += 1
        if len(order):
            nearest[u] = d[order[0]]
        for rank, t in enumerate(order[:k_max]):
            c_uav.append(u)
            c_tgt.append(t)
            c_dist.append(d[t])
            c_rank.append(rank)
        du = np.sqrt(((scene.uav_pos - scene.uav_pos[u]) ** 2).sum(axis=1))
        du[u] = np.inf
        for v in np.argsort(du, kind="stable")[:n_nb]:
            uu_src.append(u)
            uu_dst.append(v)
            uu_dist.append(du[v])
    as_int = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
    return Neighbours(
        as_int(c_uav),
        as_int(c_tgt),
        np.asarray(c_dist, dtype=np.float64),
        as_int(c_rank),
        n_feasible,
        n_reach,
        nearest,
        as_int(uu_src),
        as_int(uu_dst),
        np.asarray(uu_dist, dtype=np.float64),
    )


class NaiveSceneDataset(Dataset):
    """Raw scenes and their MILP labels; the graph is built anew on every access."""

    def __init__(self, scenes: list[Scene], labels: list[np.ndarray], k_max: int = 16, uav_neighbours: int = 8) -> None:
        self.scenes, self.labels, self.k_max, self.uav_neighbours = scenes, labels, k_max, uav_neighbours

    def __len__(self) -> int:
        return len(self.scenes)

    def __getitem__(self, i: int) -> Data:
        scene = self.scenes[i]
        graph = graph_from_neighbours(scene, loop_neighbours(scene, self.k_max, self.uav_neighbours), self.labels[i])
        graph.cand_relaxed = relax_candidates(graph)
        return graph


def naive_loader(
    scenes: list[Scene],
    labels: list[np.ndarray],
    batch_size: int,
    k_max: int = 16,
    uav_neighbours: int = 8,
    shuffle: bool = True,
) -> DataLoader:
    return DataLoader(
        NaiveSceneDataset(scenes, labels, k_max, uav_neighbours), batch_size=batch_size, shuffle=shuffle, drop_last=True
    )
