"""Scoring a scene of any size in spatial tiles: memory set by the tile, not the scene; the whole scene's logits.

The plane is cut into square cells; each cell's UAVs (its *core*) are scored on the subscene of every UAV and
target within ``halo`` of the cell. What the model says of a node depends on the scene only near it. With E the
larger of the largest range and the largest distance from a UAV to its farthest UAV neighbour (no edge is longer):
a UAV's features and out-edges are exact when nothing within E of it is missing, a node's in-edges at 2E (their
sources' lists exact), the relaxation's per-node summary at 3E (a UAV reads its relaxed target's count); each of
the L layers reads one edge further, and a candidate's score reads its target, one more. A halo of (L + 4) E thus
gives every core UAV the whole-scene forward's logits (tests: the same assignment, fp64).

The linear relaxation (an input of a model that reads it) and the balancing couple the whole scene: both run
once over every candidate, on per-pair arrays of a few numbers; the tiles bound what grows with the model, the
forward's hidden-sized activations per message edge. Targets' idle logits are left 0: no target idles (its
log-probability of idling is 0 whatever its logit).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from scipy.spatial import cKDTree
from torch_geometric.data import Batch

from uavgnn.inference.decoders import CHECK_EVERY, decision_rounds
from uavgnn.inference.refinement import round_assignment
from uavgnn.models import TransformerGNN
from uavgnn.models.policy import decided_log_probs, graph_logits, message_graph, reads_relaxation
from uavgnn.problem.graphs import GraphSettings, build_graph
from uavgnn.problem.scenes import PARALLEL_QUERY, Scene
from uavgnn.solvers.min_cost_flow import flow_choice, relaxation_problem

RANK = np.int16  # a candidate's rank, stored narrow while the tiles' candidates are gathered (memory)
QUERY_BLOCK = 2**16  # UAVs per k-d tree query of the neighbour distances (bounded memory)


@dataclass(frozen=True)
class Tile:
    """One cell's subscene: its UAVs and targets (the scene's numbering, increasing) and which UAVs are the core."""

    uav: np.ndarray
    target: np.ndarray
    core: np.ndarray  # bool over ``uav``

    def scene(self, scene: Scene) -> Scene:
        """The subscene itself."""
        u, t = self.uav, self.target
        return Scene(
            scene.uav_pos[u], scene.uav_range[u], scene.target_pos[t], scene.need[t], scene.value[t], scene.lam
        )


def halo_width(scene: Scene, uav_neighbours: int, layers: int) -> float:
    """(``layers`` + 4) E: how far from its cell a tile must see for its core to be scored exactly (module
    docstring)."""
    reach = float(scene.uav_range.max())
    n_nb = min(uav_neighbours, scene.n_uav - 1)
    if n_nb > 0:
        tree, workers = cKDTree(scene.uav_pos), -1 if scene.n_uav >= PARALLEL_QUERY else 1
        for start in range(0, scene.n_uav, QUERY_BLOCK):
            dist, _ = tree.query(scene.uav_pos[start : start + QUERY_BLOCK], k=n_nb + 1, workers=workers)
            reach = max(reach, float(dist[:, -1].max()))
    return (layers + 4) * reach


def cut_tiles(scene: Scene, tile_uavs: int, halo: float) -> list[Tile]:
    """The tiles of ``scene``: square cells of about ``tile_uavs`` UAVs (at least ``halo`` wide, so a halo spans
    one cell at most), each with everything within ``halo`` of it."""
    points = np.concatenate([scene.uav_pos, scene.target_pos])
    low, high = points.min(0), points.max(0)
    area = float(np.prod(np.maximum(high - low, 1e-9)))
    side = max(halo, math.sqrt(area * tile_uavs / scene.n_uav), 1e-9)
    shape = np.floor((high - low) / side).astype(np.int64) + 1
    uav_cells, target_cells = _Cells(scene.uav_pos, low, side, shape), _Cells(scene.target_pos, low, side, shape)
    tiles = []
    for cell in np.unique(uav_cells.cell):
        cx, cy = divmod(int(cell), int(shape[1]))
        box_low = low + np.array([cx, cy]) * side - halo
        box_high = box_low + side + 2 * halo
        uav = uav_cells.within(cx, cy, box_low, box_high)
        tiles.append(Tile(uav, target_cells.within(cx, cy, box_low, box_high), uav_cells.cell[uav] == cell))
    return tiles


class _Cells:
    """Points bucketed by grid cell: the points of a box one cell wider than a cell, without a pass over all."""

    def __init__(self, pos: np.ndarray, low: np.ndarray, side: float, shape: np.ndarray) -> None:
        xy = np.minimum(np.floor((pos - low) / side).astype(np.int64), shape - 1)
        self.pos, self.shape = pos, shape
        self.cell = xy[:, 0] * shape[1] + xy[:, 1]
        self.order = np.argsort(self.cell, kind="stable")
        self.start = np.searchsorted(self.cell[self.order], np.arange(int(shape.prod()) + 1))

    def within(self, cx: int, cy: int, box_low: np.ndarray, box_high: np.ndarray) -> np.ndarray:
        """The points (increasing) of the cells around (cx, cy) that lie in the box."""
        parts = []
        for x in range(max(cx - 1, 0), min(cx + 2, int(self.shape[0]))):
            first, last = x * self.shape[1] + max(cy - 1, 0), x * self.shape[1] + min(cy + 1, int(self.shape[1]) - 1)
            parts.append(self.order[self.start[first] : self.start[last + 1]])
        near = np.sort(np.concatenate(parts))
        inside = np.all((self.pos[near] >= box_low) & (self.pos[near] <= box_high), axis=1)
        return near[inside]


@dataclass
class TiledScores:
    """What ``score_tiled`` returns, laid out as the whole scene's graph holds it: every candidate (UAV node,
    target node) in the graph's order, which the relaxation takes (None: the model does not read it), which are
    kept, the kept ones' log-probabilities, every node's log-probability of idling, and the seconds spent building
    graphs (with the relaxation) and in the forward."""

    cand_index: torch.Tensor
    cand_relaxed: torch.Tensor | None
    keep: torch.Tensor
    cand_logp: torch.Tensor
    idle_logp: torch.Tensor
    build_s: float = 0.0
    forward_s: float = 0.0


def scene_batch(scene: Scene, cand_index: torch.Tensor, cand_relaxed: torch.Tensor | None = None) -> Batch:
    """The light batch of one scene that decoders read (its candidates and needs), without features or message
    edges."""
    nodes, device = scene.n_uav + scene.n_target, cand_index.device
    batch = Batch(
        cand_index=cand_index,
        need=torch.cat([torch.zeros(scene.n_uav, dtype=torch.long), torch.as_tensor(scene.need).long()]).to(device),
        batch=torch.zeros(nodes, dtype=torch.long, device=device),
        ptr=torch.tensor([0, nodes], device=device),
        n_uav=torch.tensor([scene.n_uav], device=device),
        num_nodes=nodes,
    )
    if cand_relaxed is not None:
        batch.cand_relaxed = cand_relaxed
    batch._num_graphs = 1
    return batch


def score_tiled(
    model: TransformerGNN, scene: Scene, graph: GraphSettings, tile_uavs: int, max_edges: int, device: torch.device
) -> TiledScores:
    """The model's policy on ``scene``, its refinement rounds included, scored tile by tile (module docstring):
    the whole-scene forward's logits, from one tile's graph at a time; ``max_edges``: a tile's forward runs
    layer-wise in blocks of that many message edges."""
    clock = _Clock()
    with clock("build_s"):
        tiles = cut_tiles(scene, tile_uavs, halo_width(scene, graph.uav_neighbours, len(model.layers)))
        relaxed = _relaxed_targets(scene, tiles, graph) if reads_relaxation(model) else None
    k, assignment = graph.k(scene.n_uav), None
    for r in range(getattr(model, "refine_rounds", 0) + 1):
        cand_index, rank, cand_logit, idle_logit = _tiled_forward(
            model, scene, tiles, graph, relaxed, device, max_edges, assignment, clock
        )
        keep = (rank < k).nonzero().squeeze(1)
        batch = scene_batch(scene, cand_index)
        with clock("forward_s"):
            cand_logp, idle_logp = decided_log_probs(
                model, cand_logit[keep], idle_logit, cand_index[:, keep], batch.need
            )
        if r < getattr(model, "refine_rounds", 0):
            assignment = round_assignment(
                batch, cand_logp, cand_index[:, keep], decision_rounds(cand_logp), CHECK_EVERY
            )
    cand_relaxed = None
    if relaxed is not None:
        cand_relaxed = torch.from_numpy(relaxed).to(device)[cand_index[0]] == cand_index[1] - scene.n_uav
    return TiledScores(cand_index, cand_relaxed, keep, cand_logp, idle_logp, clock.build_s, clock.forward_s)


def _relaxed_targets(scene: Scene, tiles: list[Tile], graph: GraphSettings) -> np.ndarray:
    """Each UAV's target in the linear relaxation over the whole scene's candidates (-1: none): the flow of
    ``relax_candidates``, its pairs gathered tile by tile in the whole graph's order (the same optimum, ties
    broken alike)."""
    columns: list[list[np.ndarray]] = [[], [], [], []]  # UAV, rank, target, profit of each tile's core candidates
    for tile in tiles:
        data = build_graph(tile.scene(scene), graph.k_max, graph.uav_neighbours)
        uav, target, profit, _, _ = relaxation_problem(data)
        core = tile.core[uav]
        rank = data.cand_rank.numpy()[core].astype(RANK)
        _append(columns, (tile.uav[uav[core]], rank, tile.target[target[core]], profit[core]))
        del data, uav, target, profit
    uav, rank, target, profit = _joined(columns)
    order = _scene_order(uav, rank, scene.n_uav)
    uav, target, profit = uav[order], target[order], profit[order]
    del order, rank
    chosen = flow_choice(uav, target, profit, scene.need, scene.n_uav)
    relaxed = np.full(scene.n_uav, -1, dtype=np.int64)
    relaxed[uav[chosen]] = target[chosen]
    return relaxed


def _tiled_forward(
    model: TransformerGNN,
    scene: Scene,
    tiles: list[Tile],
    graph: GraphSettings,
    relaxed: np.ndarray | None,
    device: torch.device,
    max_edges: int,
    assignment: torch.Tensor | None,
    clock: _Clock,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The whole scene's candidates (UAV node, target node) in its graph's order, their ranks, their logits (-inf
    where not kept) and every node's idle logit (targets: 0), from each tile's forward kept for its core."""
    n, columns = scene.n_uav, [[], [], [], []]  # UAV, rank, target, logit of each tile's core candidates
    idle_logit = torch.zeros(n + scene.n_target, device=device)
    for tile in tiles:
        with clock("build_s"):
            data = build_graph(tile.scene(scene), graph.k_max, graph.uav_neighbours, device=device)
            uav, target = data.cand_index
            if relaxed is not None:
                data.cand_relaxed = torch.from_numpy(
                    relaxed[tile.uav[uav.cpu().numpy()]] == tile.target[target.cpu().numpy() - len(tile.uav)]
                ).to(device)
            data.n_uav = torch.tensor([len(tile.uav)])
            batch = Batch.from_data_list([data]).to(device)
        with clock("forward_s"):
            nodes = torch.from_numpy(np.concatenate([tile.uav, n + tile.target])).to(device)
            message = message_graph(batch, graph.k(n), 0, relaxed is not None)
            kept_logit, idle = graph_logits(
                model, message, max_edges, None if assignment is None else assignment[nodes]
            )
            logit = torch.full(uav.shape, float("-inf"), device=device)
            logit[message.keep] = kept_logit.float()
            core = torch.from_numpy(tile.core).to(device)
            idle_logit[nodes[: len(tile.uav)][core]] = idle[: len(tile.uav)][core].float()
            mine = (core[uav]).cpu().numpy()
            local_uav, local_target = uav.cpu().numpy()[mine], target.cpu().numpy()[mine]
            rank = data.cand_rank.cpu().numpy()[mine].astype(RANK)
            own = (tile.uav[local_uav], rank, tile.target[local_target - len(tile.uav)], logit.cpu().numpy()[mine])
            _append(columns, own)
            del data, batch, message, logit
    uav, rank, target, logit = _joined(columns)
    order = _scene_order(uav, rank, n)
    cand_index = torch.from_numpy(np.stack([uav[order], n + target[order].astype(np.int64)]).astype(np.int64))
    del uav, target
    return (
        cand_index.to(device),
        torch.from_numpy(rank[order]).to(device),
        torch.from_numpy(logit[order]).to(device),
        idle_logit,
    )


def _append(columns: list[list[np.ndarray]], parts: tuple[np.ndarray, ...]) -> None:
    """One tile's part of each column, scene numbers narrowed to 32 bits while the tiles are gathered (memory)."""
    for column, part in zip(columns, parts):
        column.append(part.astype(np.int32) if part.dtype == np.int64 else part)


def _joined(columns: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Each column's tile parts joined into one array, the parts let go of column by column (memory)."""
    joined = []
    for column in columns:
        joined.append(np.concatenate(column))
        column.clear()
    return joined


def _scene_order(uav: np.ndarray, rank: np.ndarray, n_uav: int) -> np.ndarray:
    """The permutation that puts candidates gathered tile by tile in the whole graph's order (by UAV, then rank:
    each UAV's ranks are 0, 1, ...), by counting, not sorting."""
    count = np.bincount(uav, minlength=n_uav)
    position = (np.cumsum(count) - count)[uav] + rank
    order = np.empty_like(position)
    order[position] = np.arange(len(position))
    return order


class _Clock:
    """Seconds spent per phase, summed over the tiles."""

    def __init__(self) -> None:
        self.build_s = self.forward_s = 0.0

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, phase, getattr(self, phase) + time.perf_counter() - start)
