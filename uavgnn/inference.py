"""Apply a trained model to one scene of any size: graph build, one forward pass, decode."""

from __future__ import annotations

import time

import numpy as np
import torch
from torch_geometric.data import Batch

from uavgnn.decoders import decode
from uavgnn.models import TransformerGNN
from uavgnn.models.policy import policy_log_probs
from uavgnn.problem.graphs import GraphSettings, build_graph
from uavgnn.problem.metrics import reward
from uavgnn.problem.scenes import Scene
from uavgnn.runtime import autocast
from uavgnn.solvers import SolveResult

CHUNK_EDGES = 2**16  # message edges per layer-wise block (TransformerGNN.forward_chunked): cache-sized blocks ran the
# 1M-node forward 3.4x faster than 2**20-edge blocks on the 2-core CPU (88 -> 26 s, BENCHMARKS.md)
SPATIAL_ORDER = 10_000  # UAVs from which nodes are put in Morton order before the build (memory locality)


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
    Neighbours then sit near each other in memory: the forward's gathers over 22 million edges of a
    1M-node scene hit the cache (-15% forward time measured, BENCHMARKS.md); the graph is the same."""
    cell = float(scene.uav_range.max())
    uav = np.argsort(_morton(scene.uav_pos, cell), kind="stable")
    target = np.argsort(_morton(scene.target_pos, cell), kind="stable")
    return (Scene(scene.uav_pos[uav], scene.uav_range[uav], scene.target_pos[target], scene.need[target],
                  scene.value[target], scene.lam), uav, target)


@torch.no_grad()
def solve_with_model(model: TransformerGNN, scene: Scene, graph: GraphSettings, decoder: str = "greedy",
                     device: torch.device | str = "cpu", amp_dtype: torch.dtype | None = None
                     ) -> tuple[SolveResult, dict[str, float]]:
    """The model's assignment of ``scene`` and the time split {build_s, forward_s, decode_s}; ``graph``:
    the settings the model was trained with (``load_model``); ``amp_dtype`` runs the forward under autocast."""
    device = torch.device(device)
    k = graph.k(scene.n_uav)
    start = time.perf_counter()
    original = scene
    if scene.n_uav >= SPATIAL_ORDER:
        scene, uav_order, target_order = spatial_order(scene)
    data = build_graph(scene, graph.k_max, graph.uav_neighbours, device=device)
    data.n_uav = torch.tensor([scene.n_uav])
    batch = Batch.from_data_list([data]).to(device)
    built = time.perf_counter()
    with autocast(device, amp_dtype):
        cand_logp, idle_logp, keep = policy_log_probs(model.eval(), batch, k, max_edges=CHUNK_EDGES)
    cand_logp, idle_logp = cand_logp.float(), idle_logp.float()
    if device.type == "cuda":
        torch.cuda.synchronize()
    forwarded = time.perf_counter()
    assignment = np.asarray(decode(decoder, batch, cand_logp, idle_logp, keep, [scene])[0], dtype=np.int64)
    if scene is not original:  # back to the caller's UAV and target numbering
        assignment = np.where(assignment >= 0, target_order[assignment], assignment)[np.argsort(uav_order)]
    done = time.perf_counter()
    timing = {"build_s": built - start, "forward_s": forwarded - built, "decode_s": done - forwarded}
    result = SolveResult(assignment=assignment, objective=reward(original, assignment), status="feasible",
                         solver=f"model ({decoder})", wall_time=done - start)
    return result, timing
