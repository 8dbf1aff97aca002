"""Apply a trained model to one scene of any size: graph build, one forward pass (``score_scene``), decode."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.data import Batch, Data

from uavgnn.inference.decoders import decode
from uavgnn.inference.refinement import refined_log_probs
from uavgnn.inference.tiles import scene_batch, score_tiled
from uavgnn.infrastructure.device import autocast
from uavgnn.infrastructure.memory import check_fits
from uavgnn.models import TransformerGNN
from uavgnn.models.policy import balancing_of, reads_relaxation
from uavgnn.problem.graphs import GraphSettings, build_graph
from uavgnn.problem.metrics import reward
from uavgnn.problem.scenes import Scene
from uavgnn.solvers.min_cost_flow import relax_candidates
from uavgnn.solvers.result import SolveResult

CHUNK_EDGES = 2**16  # message edges per layer-wise block (TransformerGNN.forward_chunked): cache-sized blocks run the
# forward of a large scene several times faster than blocks of 2**20 edges on a CPU (BENCHMARKS.md)
SPATIAL_ORDER = 10_000  # UAVs from which nodes are put in Morton order before the build (memory locality)
TILE_UAVS = 2**16  # UAVs from which a scene is scored in tiles of about this many (``inference.tiles``)
# Peak memory of scoring and deciding a scene: per candidate pair and hidden unit, per pair (the graph, the
# relaxation's flow, the decision) and a fixed part (working buffers). The pretrained policy (hidden 64, 32
# candidates) measured 313 MB at 16,384 UAVs, 831 at 65,536 and 2,830 at 262,144 (10.4 KB a UAV at the margin);
# these give 432, 977 and 3,140 (benchmarks/bench_memory.py). In tiles the hidden-sized part is a tile's, with its
# halo (TILE_HALO_SHARE more UAVs at most)
BYTES_PER_PAIR_UNIT, BYTES_PER_PAIR, FIXED_BYTES = 5, 48, 256 * 2**20
TILE_HALO_SHARE = 2.0


def scoring_bytes(model: TransformerGNN, n_uav: int, k: int, tile_uavs: int | None = None) -> float:
    """What ``score_scene`` and the decision after it hold at most, for ``n_uav`` UAVs of ``k`` candidates, scored
    whole or in tiles of about ``tile_uavs`` UAVs."""
    hidden = model.final_norm.normalized_shape[0]
    scored = n_uav if tile_uavs is None else min(n_uav, tile_uavs * (1 + TILE_HALO_SHARE))
    return scored * k * BYTES_PER_PAIR_UNIT * hidden + n_uav * k * BYTES_PER_PAIR + FIXED_BYTES


def _morton(pos: np.ndarray, cell: float) -> np.ndarray:
    """Z-order key of each position's cell: cells close in the plane get close keys."""
    c = np.clip(np.floor((pos - pos.min(0)) / cell), 0, 2**16 - 1).astype(np.int64)

    def spread(v: np.ndarray) -> np.ndarray:  # 16 bits -> the even bits of 32
        v = (v | (v << 8)) & 0x00FF00FF
        v = (v | (v << 4)) & 0x0F0F0F0F
        v = (v | (v << 2)) & 0x33333333
        return (v | (v << 1)) & 0x55555555

    return spread(c[:, 0]) | (spread(c[:, 1]) << 1)


def spatial_order(scene: Scene) -> tuple[Scene, np.ndarray, np.ndarray]:
    """The scene with UAVs and targets each in Morton order of range-sized cells, and the two permutations.
    Neighbours then sit near each other in memory: the forward's gathers over the edges of a large scene hit the
    cache (a faster forward, BENCHMARKS.md); the graph is the same."""
    cell = float(scene.uav_range.max())
    uav = np.argsort(_morton(scene.uav_pos, cell), kind="stable")
    target = np.argsort(_morton(scene.target_pos, cell), kind="stable")
    return (
        Scene(
            scene.uav_pos[uav],
            scene.uav_range[uav],
            scene.target_pos[target],
            scene.need[target],
            scene.value[target],
            scene.lam,
        ),
        uav,
        target,
    )


@dataclass
class SceneScores:
    """The model's log-probabilities for one scene, on the graph it was built for. ``scene`` is the scene as
    scored (Morton-ordered when large); ``uav_order``/``target_order`` map it back to the caller's numbering."""

    scene: Scene
    batch: Batch
    cand_logp: torch.Tensor
    idle_logp: torch.Tensor
    keep: torch.Tensor
    uav_order: np.ndarray
    target_order: np.ndarray
    build_s: float
    forward_s: float

    def to_caller(self, assignment: np.ndarray) -> np.ndarray:
        """An assignment of ``scene`` in the caller's UAV and target numbering."""
        mapped = np.where(assignment >= 0, self.target_order[np.maximum(assignment, 0)], assignment)
        return mapped[np.argsort(self.uav_order)]

    def relaxed(self) -> np.ndarray | None:
        """The linear relaxation's target of each UAV (-1 idle) in the caller's numbering, when the graph holds it
        (a model that reads it: ``scene_graph``), else None."""
        if "cand_relaxed" not in self.batch:
            return None
        uav, target = self.batch.cand_index[:, self.batch.cand_relaxed].cpu().numpy()
        relaxed = np.full(self.scene.n_uav, -1, dtype=np.int64)
        relaxed[self.uav_order[uav]] = self.target_order[target - self.scene.n_uav]
        return relaxed

    def candidates(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(UAV, target, log-probability) of every scored candidate, in the caller's numbering."""
        index = self.batch.cand_index[:, self.keep].cpu().numpy()
        n = self.scene.n_uav
        return self.uav_order[index[0]], self.target_order[index[1] - n], self.cand_logp.cpu().numpy()


def scene_graph(model: TransformerGNN, scene: Scene, graph: GraphSettings, device: torch.device | str = "cpu") -> Data:
    """``scene``'s graph as ``model`` reads it: built with its settings ``graph``, with the linear relaxation's pairs
    when it reads them (``relax_candidates``)."""
    data = build_graph(scene, graph.k_max, graph.uav_neighbours, device=device)
    if reads_relaxation(model):
        data.cand_relaxed = relax_candidates(data)
    return data


@torch.no_grad()
def score_scene(
    model: TransformerGNN,
    scene: Scene,
    graph: GraphSettings,
    device: torch.device | str = "cpu",
    amp_dtype: torch.dtype | None = None,
    tile_uavs: int = TILE_UAVS,
) -> SceneScores:
    """Build ``scene``'s graph with the checkpoint's settings ``graph`` (``scene_graph``) and run the model once;
    a scene of more than ``tile_uavs`` UAVs is scored in tiles of about that many (``inference.tiles``: the same
    scores in memory set by the tile)."""
    device = torch.device(device)
    tiled = scene.n_uav > tile_uavs
    check_fits(
        f"scoring a scene of {scene.n_uav:,} UAVs with the model",
        scoring_bytes(model, scene.n_uav, graph.k(scene.n_uav), tile_uavs if tiled else None),
        "solve it with solver=mcf or solver=lap, or split the scene",
        device,
    )
    start = time.perf_counter()
    uav_order, target_order = np.arange(scene.n_uav), np.arange(scene.n_target)
    if scene.n_uav >= SPATIAL_ORDER:
        scene, uav_order, target_order = spatial_order(scene)
    with autocast(device, amp_dtype):
        if tiled:
            scores = score_tiled(model.eval(), scene, graph, tile_uavs, CHUNK_EDGES, device)
            batch = scene_batch(scene, scores.cand_index, scores.cand_relaxed)
            policy, forward_s = (scores.cand_logp, scores.idle_logp, scores.keep), scores.forward_s
            build_s = time.perf_counter() - start - forward_s  # the order, the tiles' graphs, the relaxation
        else:
            data = scene_graph(model, scene, graph, device)
            data.n_uav = torch.tensor([scene.n_uav])
            batch = Batch.from_data_list([data]).to(device)
            build_s = time.perf_counter() - start
            policy = refined_log_probs(model.eval(), batch, graph.k(scene.n_uav), max_edges=CHUNK_EDGES)
            forward_s = time.perf_counter() - start - build_s
    if device.type == "cuda":
        torch.cuda.synchronize()
    cand_logp, idle_logp, keep = policy
    return SceneScores(
        scene, batch, cand_logp.float(), idle_logp.float(), keep, uav_order, target_order, build_s, forward_s
    )


def solve_with_model(
    model: TransformerGNN,
    scene: Scene,
    graph: GraphSettings,
    decoder: str = "greedy",
    device: torch.device | str = "cpu",
    amp_dtype: torch.dtype | None = None,
    tile_uavs: int = TILE_UAVS,
) -> tuple[SolveResult, dict[str, float]]:
    """The model's assignment of ``scene`` and the time split {build_s, forward_s, decode_s}; ``graph``:
    the settings the model was trained with (``scene_policy.load_policy``); ``amp_dtype`` runs the forward under
    autocast; ``tile_uavs``: see ``score_scene``."""
    scores = score_scene(model, scene, graph, device, amp_dtype, tile_uavs)
    start = time.perf_counter()
    decoded = decode(
        decoder,
        scores.batch,
        scores.cand_logp,
        scores.idle_logp,
        scores.keep,
        [scores.scene],
        balancing=balancing_of(model),
    )[0]
    assignment = scores.to_caller(np.asarray(decoded, dtype=np.int64))
    timing = {"build_s": scores.build_s, "forward_s": scores.forward_s, "decode_s": time.perf_counter() - start}
    result = SolveResult(
        assignment=assignment,
        objective=reward(scene, assignment),
        status="feasible",
        solver=f"model ({decoder})",
        wall_time=sum(timing.values()),
    )
    return result, timing
