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
- the linear relaxation: ``cand_relaxed`` (C,) True on the pair the min-cost flow over the graph's candidates
  takes (``solvers.min_cost_flow.relax_candidates``, added by whoever builds graphs for a model that reads it:
  the cache always, fresh batches and single scenes when the model asks). ``relaxation_inputs`` turns it into
  the inputs of a model built with ``relaxation``: per node how the relaxation fills each target (complete or
  left partial, which ``lap`` and ``mcf`` then drop), per candidate whether it is the relaxation's pair.
- padded batches (``build_graph_batch``): every UAV has ``min(k_max, M)``
  candidate slots and ``cand_valid`` (C,) marks the feasible ones (the policy
  gives the others probability 0), ``kept_counts`` and ``max_nodes`` are known
  on the host: every shape of a step is a function of (B, N, M, k).

Features: displacements and distances are divided by the UAV's range; every
unbounded quantity (range, counts, value per slot, travel cost, lam) goes
through ``squash(x, c) = x / (x + c)`` and need enters as ``1 / need``, so
every feature stays in [-1, 1] under any valid scene: a need of 5 or a range of
8 is a new value inside the trained interval, not a value beyond it (a shifted test set stays in range).
No absolute position anywhere, so the graph is translation invariant and
independent of the scene's size.

One feature function (``graph_tensors``, torch, on any device) serves every
builder: ``build_graph`` (one scene; k-d tree on the CPU, cell grid on a GPU)
and ``build_graph_batch`` (B generated scenes of one size at once, dense
``topk``, no loop over scenes), so cached and fresh graphs cannot drift apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.data import Batch, Data

from uavgnn.problem.metrics import IDLE
from uavgnn.problem.neighbours import Neighbours, dense_neighbours, grid_neighbours, kdtree_neighbours
from uavgnn.problem.scene_batch import SceneBatch
from uavgnn.problem.scenes import Scene

FEATURE_SET = "rel-v4"  # bump when features change: part of the cache key and of every checkpoint
READS_FEATURE_SETS = ("rel-v3", FEATURE_SET)  # what a model trained on these reads is in today's graphs (v4 added
#                                               cand_relaxed and changed nothing else)
NODE_DIM = 6  # [is_uav, is_target, f0, f1, f2, f3]
EDGE_DIM = 7  # [cand, cand_reverse, uav_uav, f0, f1, f2, f3]
RANGE_SCALE = 4.0  # squash midpoints: the typical range, value per slot, count and lam of the default task
VALUE_SCALE = 1.5
COUNT_SCALE = 8.0
LAM_SCALE = 0.1
VALUE_COLUMN = 3  # target feature: squash(value / need, VALUE_SCALE) (rewards are computed back from it)
COST_COLUMN = 6  # candidate feature: squash(lam * dist / (value / need), 1), travel cost per unit of slot value
ASSIGNMENT_DIM = 3  # refinement input per node (assignment_features): [fill, complete, 1]
RELAXATION_NODE_DIM = 3  # relaxation input per node (relaxation_inputs): [fill or sent, complete, partial]
RELAXATION_EDGE_DIM = 1  # ... per candidate edge: [the relaxation's pair]


def squash(x: torch.Tensor, scale: float) -> torch.Tensor:
    """``x / (x + scale)`` for x >= 0: monotone, in [0, 1), 0.5 at ``scale``; no value of x leaves the range."""
    return x / (x + scale)


def unsquash(y: torch.Tensor, scale: float) -> torch.Tensor:
    """The inverse of ``squash``: a feature back to the quantity (the reward is computed from features)."""
    return scale * y / (1 - y)


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
    features: str = FEATURE_SET  # a model only understands the feature set it was trained on

    def k(self, n_uav: int) -> int:
        """The candidates per UAV at inference for scenes of ``n_uav`` UAVs (training jitters it)."""
        return adaptive_k(n_uav, self.k_min, self.k_divisor, self.k_max)


def build_graph(
    scene: Scene,
    k_max: int = 16,
    uav_neighbours: int = 8,
    assignment: np.ndarray | None = None,
    device: torch.device | str = "cpu",
) -> Data:
    """One scene's graph on ``device``; ``assignment`` (the MILP labels) adds ``cand_label``/``busy``.
    Neighbours come from a k-d tree on the CPU, from the cell grid (``grid_neighbours``) on a GPU."""
    scenes = SceneBatch.from_scenes([scene], device)
    if scenes.uav_pos.device.type == "cpu":
        nb = kdtree_neighbours(scene, k_max, uav_neighbours)
    else:
        nb = grid_neighbours(scenes, k_max, uav_neighbours)
    return _single_graph(scenes, nb, assignment)


def graph_from_neighbours(scene: Scene, nb: Neighbours, assignment: np.ndarray | None = None) -> Data:
    """One scene's graph once its neighbours are known (``graph_tensors`` of a batch of one)."""
    device = nb.c_uav.device if torch.is_tensor(nb.c_uav) else "cpu"
    return _single_graph(SceneBatch.from_scenes([scene], device), nb, assignment)


def _single_graph(scenes: SceneBatch, nb: Neighbours, assignment: np.ndarray | None) -> Data:
    labels = None if assignment is None else torch.as_tensor(assignment, device=scenes.uav_pos.device)
    return Data(**graph_tensors(scenes, nb, labels))


def build_graph_batch(scenes: SceneBatch, k_max: int = 16, uav_neighbours: int = 8) -> Batch:
    """The padded PyG batch of B scenes of one size, built on their device without a loop over scenes: the
    graphs of ``Batch.from_data_list([build_graph(s) for s in scenes])`` with every UAV's candidate list
    padded to ``min(k_max, M)`` slots (``cand_valid``), so that no shape depends on the data (no labels:
    fresh scenes have none)."""
    t = graph_tensors(scenes, dense_neighbours(scenes, k_max, uav_neighbours))
    b, n = scenes.uav_pos.shape[:2]
    m = scenes.target_pos.shape[1]
    dev = scenes.uav_pos.device
    graph_ids = torch.arange(b, device=dev)
    batch = Batch(
        **t,
        batch=graph_ids.repeat_interleave(n + m),
        ptr=torch.arange(b + 1, device=dev) * (n + m),
        n_uav=torch.full((b,), n, device=dev),
        scene_id=graph_ids,
    )
    batch._num_graphs = b
    batch.kept_counts = [b * n * min(r, k_max, m) for r in range(k_max + 1)]  # slots of rank < r
    batch.max_nodes = n + m
    return batch


def graph_tensors(
    scenes: SceneBatch, nb: Neighbours, assignment: torch.Tensor | None = None
) -> dict[str, torch.Tensor | int]:
    """Features (and, with the MILP's ``assignment`` (B*N,), labels) of B scenes' graphs laid out as PyG
    batches them: scene by scene, each scene's UAV nodes then its target nodes; computed on the scenes'
    device in their precision, stored as float32."""
    b, n = scenes.uav_pos.shape[:2]
    m = scenes.target_pos.shape[1]
    dev, dtype = scenes.uav_pos.device, scenes.uav_pos.dtype
    t = lambda a: torch.as_tensor(a, device=dev)  # noqa: E731  (arrays of the k-d tree or naive search)
    c_uav, c_tgt, c_dist, c_rank = t(nb.c_uav).long(), t(nb.c_tgt).long(), t(nb.c_dist).to(dtype), t(nb.c_rank).long()
    src, dst, d = t(nb.uu_src).long(), t(nb.uu_dst).long(), t(nb.uu_dist).to(dtype)
    pos, r = scenes.uav_pos.reshape(-1, 2), scenes.uav_range.reshape(-1)
    tpos, need, value = scenes.target_pos.reshape(-1, 2), scenes.need.reshape(-1), scenes.value.reshape(-1)
    need_f = need.to(dtype)
    lam = torch.as_tensor(scenes.lam, dtype=dtype, device=dev).expand(b).repeat_interleave(n)
    nearest = torch.clamp(t(nb.nearest).to(dtype) / r, max=1.0)
    n_reach = t(nb.n_reach).to(dtype)
    ones, zeros = torch.ones(b * n, dtype=dtype, device=dev), torch.zeros(b * n, dtype=dtype, device=dev)
    uav_x = torch.stack(
        [
            ones,
            zeros,
            squash(r, RANGE_SCALE),
            squash(t(nb.n_feasible).to(dtype), COUNT_SCALE),
            nearest,
            squash(lam, LAM_SCALE),
        ],
        1,
    )
    tones, tzeros = torch.ones(b * m, dtype=dtype, device=dev), torch.zeros(b * m, dtype=dtype, device=dev)
    tgt_x = torch.stack(
        [
            tzeros,
            tones,
            1.0 / need_f,
            squash(value / need_f, VALUE_SCALE),
            squash(n_reach, COUNT_SCALE),
            torch.clamp(n_reach / need_f, max=4.0) / 4.0,
        ],
        1,
    )

    delta = (tpos[c_tgt] - pos[c_uav]) / r[c_uav, None]
    cost = lam[c_uav] * c_dist / (value[c_tgt] / need_f[c_tgt])  # travel cost vs value per UAV slot
    c_ones = torch.ones_like(c_dist)[:, None]
    cand_attr = torch.cat(
        [c_ones, torch.zeros_like(delta), delta, (c_dist / r[c_uav])[:, None], squash(cost, 1.0)[:, None]], 1
    )
    uu_scale = (d + r[src])[:, None]  # a neighbour may lie beyond the range: bounded by d / (d + r) < 1
    u_ones = torch.ones_like(d)[:, None]
    uu_attr = torch.cat(
        [
            torch.zeros_like(uu_scale).expand(-1, 2),
            u_ones,
            (pos[dst] - pos[src]) / uu_scale,
            d[:, None] / uu_scale,
            (r[dst] / (r[dst] + r[src]))[:, None],
        ],
        1,
    )

    uav_node = c_uav + torch.div(c_uav, n, rounding_mode="floor") * m  # flat index -> node of the batch
    tgt_node = c_tgt + (torch.div(c_tgt, m, rounding_mode="floor") + 1) * n
    uu_shift = torch.div(src, n, rounding_mode="floor") * m
    per_scene = lambda u, v: torch.cat([u.view(b, n, *u.shape[1:]), v.view(b, m, *v.shape[1:])], 1).flatten(0, 1)  # noqa: E731
    out: dict[str, torch.Tensor | int] = dict(
        x=per_scene(uav_x, tgt_x).float(),
        node_type=per_scene(
            torch.zeros(b * n, dtype=torch.long, device=dev), torch.ones(b * m, dtype=torch.long, device=dev)
        ),
        need=per_scene(torch.zeros(b * n, dtype=torch.long, device=dev), need.long()),
        cand_index=torch.stack([uav_node, tgt_node]),
        cand_attr=cand_attr.float(),
        cand_rank=c_rank,
        cand_target=torch.remainder(c_tgt, m),
        uu_index=torch.stack([src + uu_shift, dst + uu_shift]),
        uu_attr=uu_attr.float(),
        num_nodes=b * (n + m),
    )
    if nb.c_valid is not None:
        out["cand_valid"] = t(nb.c_valid)
    if assignment is not None:
        assignment = assignment.long().reshape(-1)
        out["cand_label"] = assignment[c_uav] == torch.remainder(c_tgt, m)
        out["busy"] = per_scene(assignment != IDLE, torch.zeros(b * m, dtype=torch.bool, device=dev))
    return out


def relaxation_inputs(batch: Data) -> tuple[torch.Tensor, torch.Tensor]:
    """The relaxation's assignment (``cand_relaxed``) as a model's input: per node (num_nodes, RELAXATION_NODE_DIM)
    a target's [UAVs sent / need, complete, partial] and a UAV's [sent, its target complete, its target partial];
    per candidate edge (C, RELAXATION_EDGE_DIM) [the relaxation's pair]. Fixed shapes, over every candidate."""
    need, (cand_uav, cand_target), chosen = batch.need, batch.cand_index, batch.cand_relaxed.float()
    is_target = need > 0
    count = torch.zeros_like(need, dtype=torch.float).index_add_(0, cand_target, chosen)
    complete = is_target & (count >= need)
    partial = is_target & (count > 0) & ~complete
    per_uav = torch.zeros(need.numel(), 3, dtype=torch.float, device=need.device).index_add_(
        0,
        cand_uav,
        chosen[:, None]
        * torch.stack([torch.ones_like(chosen), complete[cand_target].float(), partial[cand_target].float()], 1),
    )
    per_target = torch.stack([count / need.clamp(min=1), complete.float(), partial.float()], 1)
    return torch.where(is_target[:, None], per_target, per_uav), chosen[:, None]


def message_edges(
    batch: Data, k: int, cand_extra: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Truncate candidates to rank < k and assemble the message-passing graph.

    Returns ``edge_index`` (2, E), ``edge_attr`` (E, EDGE_DIM) with candidate
    edges in both directions plus UAV<->UAV edges (``cand_extra`` (C, X): more columns of every candidate edge,
    in both directions, zeros on UAV edges: E x (EDGE_DIM + X)), the indices of the kept
    candidates (K,), in order, and for a padded batch which edges are real
    (``edge_valid`` (E,), None when all are). A batch that knows on the host how many
    candidates rank below each k (``kept_counts``, from ``GraphStore.gather``
    or ``build_graph_batch``) selects them without the host reading the mask
    back (a sync on a GPU).
    """
    kept = kept_candidates(batch.cand_rank < k, kept_size(batch, k))
    cand_index = batch.cand_index[:, kept]
    cand_attr = batch.cand_attr[kept]
    reverse_attr = torch.cat(
        [cand_attr[:, 1:2], cand_attr[:, 0:1], cand_attr[:, 2:3], -cand_attr[:, 3:5], cand_attr[:, 5:]], dim=1
    )
    uu_attr = batch.uu_attr
    if cand_extra is not None:
        extra = cand_extra[kept]
        cand_attr, reverse_attr = torch.cat([cand_attr, extra], 1), torch.cat([reverse_attr, extra], 1)
        uu_attr = torch.cat([uu_attr, uu_attr.new_zeros(uu_attr.shape[0], extra.shape[1])], 1)
    edge_index = torch.cat([cand_index, cand_index.flip(0), batch.uu_index], dim=1)
    edge_attr = torch.cat([cand_attr, reverse_attr, uu_attr], dim=0)
    edge_valid = None
    if "cand_valid" in batch:
        valid = batch.cand_valid[kept]
        edge_valid = torch.cat([valid, valid, torch.ones_like(batch.uu_index[0], dtype=torch.bool)])
    return edge_index, edge_attr, kept, edge_valid


def assignment_features(need: torch.Tensor, choice: torch.Tensor) -> torch.Tensor:
    """(num_nodes, ASSIGNMENT_DIM) of an assignment, the input of a refinement round: a target node gets
    [UAVs sent / need, complete, 1], a UAV node [sent anywhere, its target complete, 1]. ``need``: per node (0
    on UAV nodes); ``choice``: each node's target node (-1 idle), as the decoders return it. Fixed shapes."""
    is_target, sent = need > 0, choice >= 0
    count = torch.zeros_like(need, dtype=torch.float).index_add_(0, choice.clamp(min=0), sent.float())
    complete = is_target & (count >= need)
    fill = torch.where(is_target, count / need.clamp(min=1), sent.float())
    done = torch.where(is_target, complete, sent & complete[choice.clamp(min=0)])
    return torch.stack([fill, done.float(), torch.ones_like(fill)], 1)


def with_budget(batch: Data, k: int) -> Data:
    """``batch`` with its candidate budget ``batch.k`` and, when the host knows how many candidates rank below
    each budget, how many rank below ``k`` (``batch.n_kept``): a compiled step reads that one size instead of
    indexing a list with k (which TorchDynamo would compile once per value of k)."""
    batch.k = k
    size = _counted_below(batch, k)
    if size is not None:
        batch.n_kept = size
    return batch


def kept_size(batch: Data, k: int) -> int | None:
    """How many candidates of ``batch`` rank below ``k``, when the host knows it without reading the device."""
    if getattr(batch, "k", None) == k and "n_kept" in batch:
        return batch.n_kept
    return _counted_below(batch, k)


def _counted_below(batch: Data, k: int) -> int | None:
    counts = getattr(batch, "kept_counts", None)  # counts[r]: candidates of rank < r (GraphStore.gather)
    return None if counts is None else counts[min(k, len(counts) - 1)]


def kept_candidates(keep: torch.Tensor, size: int | None) -> torch.Tensor:
    """Indices of ``keep``'s true entries: ``size`` of them when the host knows it (no host sync)."""
    if size is None:
        return keep.nonzero().squeeze(1)
    return torch.nonzero_static(keep, size=size).squeeze(1)


def candidate_recall(graphs: list[Data], k: int) -> float:
    """Fraction of MILP-assigned (UAV, target) pairs inside each UAV's k candidates."""
    assigned = sum(int(g.busy.sum()) for g in graphs)
    covered = sum(int((g.cand_label & (g.cand_rank < k)).sum()) for g in graphs)
    return covered / assigned if assigned else 1.0
