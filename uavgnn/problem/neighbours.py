"""Neighbour search: each UAV's nearest feasible targets (candidates) and nearest UAVs, three ways.

- ``kdtree_neighbours``: one scene on the CPU, scipy's k-d trees (the cached graphs).
- ``dense_neighbours``: B scenes of one size at once from (B, N, M) distances and ``topk``: fixed-size
  tensors on any device, for fresh-scene training batches.
- ``grid_neighbours``: one huge scene on any device from a cell list of side ``max(range)``: O(N x
  targets per cell), not the O(N x M) of a dense distance matrix.

All three return the same ``Neighbours`` (tests check them against each other); the candidate lists of
``dense_neighbours`` are padded to a fixed length (``c_valid``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.spatial import cKDTree

from uavgnn.problem.scene_batch import SceneBatch
from uavgnn.problem.scenes import PARALLEL_QUERY, Scene, feasible_pairs, rank_in_runs

Array = np.ndarray | torch.Tensor


@dataclass
class Neighbours:
    """The geometric part of a graph: candidates (sorted by UAV, then distance), feasibility
    counts and UAV<->UAV neighbours. Indices are flat over the scenes of a ``SceneBatch``
    (UAV ``b * N + i``, target ``b * M + j``); arrays or tensors, on any one device.
    Found by a k-d tree (one scene, CPU), dense ``topk`` (many small scenes) or a cell grid
    (one huge scene on the device)."""

    c_uav: Array
    c_tgt: Array
    c_dist: Array
    c_rank: Array
    n_feasible: Array  # (B*N,) feasible targets per UAV, before truncation to k_max
    n_reach: Array  # (B*M,) UAVs that can reach each target
    nearest: Array  # (B*N,) distance to the nearest feasible target (inf if none)
    uu_src: Array
    uu_dst: Array
    uu_dist: Array
    c_valid: Array | None = None  # padded candidates (dense_neighbours): False on the slots of no feasible target


def kdtree_neighbours(scene: Scene, k_max: int, uav_neighbours: int) -> Neighbours:
    n, m = scene.n_uav, scene.n_target
    pairs = feasible_pairs(scene)  # sorted by UAV, then distance
    first = np.searchsorted(pairs.uav, np.arange(n + 1))
    rank = rank_in_runs(pairs.uav)
    n_feasible = np.diff(first)
    nearest = np.full(n, np.inf)
    nearest[n_feasible > 0] = pairs.dist[first[:-1][n_feasible > 0]]
    keep = rank < k_max
    src, dst, d = nearest_uavs(scene.uav_pos, min(uav_neighbours, n - 1))
    return Neighbours(
        pairs.uav[keep],
        pairs.target[keep],
        pairs.dist[keep],
        rank[keep],
        n_feasible,
        np.bincount(pairs.target, minlength=m),
        nearest,
        src,
        dst,
        d,
    )


def nearest_uavs(pos: np.ndarray, n_nb: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(UAV, neighbour, distance) of each UAV's ``n_nb`` nearest other UAVs, by distance, equal distances to the
    lower-numbered UAV first: the same lists whichever k-d tree answers, so a subscene that holds a UAV's
    surroundings gives it the whole scene's neighbours (``inference.tiles``; clipped scenes have equal distances)."""
    n = len(pos)
    if n_nb <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    tree, workers = cKDTree(pos), -1 if n >= PARALLEL_QUERY else 1
    dist, nb = tree.query(pos, k=min(n_nb + 2, n), workers=workers)  # one more than kept: a tie at the end shows
    tied = (dist[:, 1:] == dist[:, :-1]).any(1) | (nb[:, 0] != np.arange(n))
    dist, nb = dist[:, 1 : n_nb + 1].copy(), nb[:, 1 : n_nb + 1].copy()
    for row in np.flatnonzero(tied):  # rare: every UAV as near as the last kept, ordered by distance and index
        near = np.asarray(tree.query_ball_point(pos[row], np.nextafter(dist[row, -1], np.inf)), dtype=np.int64)
        near = near[near != row]
        gap = np.sqrt(((pos[near] - pos[row]) ** 2).sum(1))
        pick = np.lexsort((near, gap))[:n_nb]
        dist[row], nb[row] = gap[pick], near[pick]
    return np.repeat(np.arange(n), n_nb), nb.reshape(-1), dist.reshape(-1)


def _distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Euclidean distances ``|a_i - b_j|`` computed directly (not cdist's matmul form, which loses digits)."""
    return torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist")


def _nearest_uavs(uav_pos: torch.Tensor, n_nb: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(distances, indices) of each UAV's ``n_nb`` nearest other UAVs, (..., N, n_nb), dense within a scene."""
    du = _distances(uav_pos, uav_pos)
    du.diagonal(dim1=-2, dim2=-1).fill_(float("inf"))  # not my own neighbour
    return torch.topk(du, n_nb, dim=-1, largest=False)


def dense_neighbours(scenes: SceneBatch, k_max: int, uav_neighbours: int) -> Neighbours:
    """Neighbours of B scenes of one size at once from (B, N, M) distances and ``topk``: no loop over
    scenes, fixed-size tensors on the scenes' device (fresh-scene training). Every UAV gets ``min(k_max, M)``
    candidate slots, its nearest feasible targets first; ``c_valid`` marks the feasible ones, so the
    shapes depend on (B, N, M) only, never on the data (no host sync)."""
    b, n = scenes.uav_pos.shape[:2]
    m = scenes.target_pos.shape[1]
    dev = scenes.uav_pos.device
    d = _distances(scenes.uav_pos, scenes.target_pos)  # (B, N, M)
    feasible = d <= scenes.uav_range[..., None]
    _, idx = torch.topk(d.masked_fill(~feasible, float("inf")), min(k_max, m), dim=-1, largest=False)
    ok = feasible.gather(-1, idx)  # the slots beyond a UAV's feasible targets hold other targets, masked
    dist = d.gather(-1, idx)
    uav = torch.arange(b * n, device=dev).view(b, n, 1).expand_as(idx)
    target = idx + (torch.arange(b, device=dev) * m).view(b, 1, 1)
    rank = torch.arange(idx.shape[-1], device=dev).expand_as(idx)
    n_nb = min(uav_neighbours, n - 1)
    if n_nb > 0:
        nb_dist, nb = _nearest_uavs(scenes.uav_pos, n_nb)
        src = torch.arange(b * n, device=dev).repeat_interleave(n_nb)
        dst = (nb + (torch.arange(b, device=dev) * n).view(b, 1, 1)).reshape(-1)
        uu_dist = nb_dist.reshape(-1)
    else:
        src = dst = torch.zeros(0, dtype=torch.long, device=dev)
        uu_dist = torch.zeros(0, dtype=d.dtype, device=dev)
    nearest = torch.where(ok[..., 0], dist[..., 0], float("inf"))
    return Neighbours(
        uav.reshape(-1),
        target.reshape(-1),
        dist.reshape(-1),
        rank.reshape(-1),
        feasible.sum(2).reshape(-1),
        feasible.sum(1).reshape(-1),
        nearest.reshape(-1),
        src,
        dst,
        uu_dist,
        ok.reshape(-1),
    )


def _cell_of(pos: torch.Tensor, origin: torch.Tensor, cell: float, width: int) -> torch.Tensor:
    """(row, col) of each position's cell on a square grid of ``width`` x ``width`` cells of side ``cell``."""
    return torch.div(pos - origin, cell, rounding_mode="floor").long().clamp(0, width - 1)


def _cell_list(
    pos: torch.Tensor, origin: torch.Tensor, cell: float, width: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(points sorted by cell, start of each cell in that order, count per cell): a cell list."""
    rc = _cell_of(pos, origin, cell, width)
    ids = rc[:, 0] * width + rc[:, 1]
    count = torch.bincount(ids, minlength=width * width)
    return torch.argsort(ids, stable=True), torch.cumsum(count, 0) - count, count


def _around(
    queries: torch.Tensor,
    origin: torch.Tensor,
    cell: float,
    width: int,
    cells: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """The points of ``cells`` in the 3 x 3 cells around each query's cell, padded to the fullest:
    (ids (q, 9 * cap), valid (q, 9 * cap))."""
    order, start, count = cells
    rc = _cell_of(queries, origin, cell, width)
    step = torch.tensor([-1, 0, 1], device=queries.device)
    row = rc[:, 0:1] + step.repeat_interleave(3)[None]  # (q, 9)
    col = rc[:, 1:2] + step.repeat(3)[None]
    inside = (row >= 0) & (row < width) & (col >= 0) & (col < width)
    cell_id = row.clamp(0, width - 1) * width + col.clamp(0, width - 1)
    n_in = torch.where(inside, count[cell_id], torch.zeros_like(cell_id))
    cap = max(int(n_in.max()), 1)
    slot = torch.arange(cap, device=queries.device)
    valid = slot[None, None] < n_in[..., None]  # (q, 9, cap)
    ids = order[(start[cell_id][..., None] + slot).clamp(max=order.numel() - 1)]
    return ids.reshape(len(queries), -1), valid.reshape(len(queries), -1)


def _pad_columns(d: torch.Tensor, ids: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``d`` and ``ids`` widened to at least ``k`` columns with (inf, 0), so ``topk(k)`` applies."""
    if d.shape[1] >= k:
        return d, ids
    extra = k - d.shape[1]
    return (
        torch.cat([d, d.new_full((len(d), extra), float("inf"))], 1),
        torch.cat([ids, ids.new_zeros((len(ids), extra))], 1),
    )


def grid_neighbours(scene: SceneBatch, k_max: int, uav_neighbours: int, block: int = 65536) -> Neighbours:
    """Neighbours of one huge scene (B = 1) from a cell grid of side ``max(range)``: a UAV's feasible
    targets all lie in the 3 x 3 cells around it, so the search is O(N x targets per cell), not O(N x M).
    UAV neighbours come from the same 3 x 3 cells; a UAV whose n-th neighbour there is farther than one
    cell (sparse regions) is searched exactly against all UAVs. UAVs go in blocks (bounded memory)."""
    uav, tgt, rng = scene.uav_pos[0], scene.target_pos[0], scene.uav_range[0]
    n, m, dev = uav.shape[0], tgt.shape[0], uav.device
    origin = torch.minimum(uav.min(0).values, tgt.min(0).values)
    extent = float(torch.maximum(uav.max(0).values, tgt.max(0).values).sub(origin).max())
    width = max(1, min(int(extent / float(rng.max())) + 1, 4096))  # huge ranges: fewer, larger cells
    cell = max(float(rng.max()), extent / width * (1 + 1e-9))
    targets, uavs = _cell_list(tgt, origin, cell, width), _cell_list(uav, origin, cell, width)
    n_nb, k = min(uav_neighbours, n - 1), min(k_max, m)
    parts: dict[str, list[torch.Tensor]] = {key: [] for key in ("dist", "idx", "n_feasible", "nb_dist", "nb")}
    n_reach = torch.zeros(m, dtype=torch.long, device=dev)
    for first in range(0, n, block):
        rows = torch.arange(first, min(n, first + block), device=dev)
        ids, valid = _around(uav[rows], origin, cell, width, targets)
        d = (tgt[ids] - uav[rows, None]).norm(dim=-1)
        feasible = valid & (d <= rng[rows, None])
        n_reach += torch.bincount(ids[feasible], minlength=m)
        parts["n_feasible"].append(feasible.sum(1))
        d, ids = _pad_columns(d.masked_fill(~feasible, float("inf")), ids, k)
        dist, pick = torch.topk(d, k, dim=1, largest=False)
        parts["dist"].append(dist)
        parts["idx"].append(ids.gather(1, pick))
        if n_nb > 0:
            ids, valid = _around(uav[rows], origin, cell, width, uavs)
            du = (uav[ids] - uav[rows, None]).norm(dim=-1).masked_fill(~valid | (ids == rows[:, None]), float("inf"))
            du, ids = _pad_columns(du, ids, n_nb)
            nb_dist, pick = torch.topk(du, n_nb, dim=1, largest=False)
            nb = ids.gather(1, pick)
            unsure = torch.nonzero(nb_dist[:, -1] > cell).squeeze(1)  # a nearer UAV may lie outside the 3 x 3 cells
            if unsure.numel():
                nb_dist[unsure], nb[unsure] = _exact_nearest_uavs(uav, rows[unsure], n_nb)
            parts["nb_dist"].append(nb_dist)
            parts["nb"].append(nb)
    dist, idx = torch.cat(parts["dist"]), torch.cat(parts["idx"])
    ok = torch.isfinite(dist)
    if n_nb > 0:
        src = torch.arange(n, device=dev).repeat_interleave(n_nb)
        dst, uu_dist = torch.cat(parts["nb"]).reshape(-1), torch.cat(parts["nb_dist"]).reshape(-1)
    else:
        src = dst = torch.zeros(0, dtype=torch.long, device=dev)
        uu_dist = uav.new_zeros(0)
    return Neighbours(
        torch.arange(n, device=dev)[:, None].expand_as(idx)[ok],
        idx[ok],
        dist[ok],
        torch.arange(k, device=dev).expand_as(idx)[ok],
        torch.cat(parts["n_feasible"]),
        n_reach,
        dist[:, 0],
        src,
        dst,
        uu_dist,
    )


def _exact_nearest_uavs(
    uav: torch.Tensor, rows: torch.Tensor, n_nb: int, block: int = 4096
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``n_nb`` nearest other UAVs of ``rows`` against every UAV (the grid's fallback)."""
    found = []
    for first in range(0, len(rows), block):
        mine = rows[first : first + block]
        du = _distances(uav[mine], uav)
        du[torch.arange(len(mine), device=uav.device), mine] = float("inf")
        found.append(torch.topk(du, n_nb, dim=1, largest=False))
    return torch.cat([f[0] for f in found]), torch.cat([f[1] for f in found])
