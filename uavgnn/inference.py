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

CHUNK_EDGES = 2**20  # above this many message edges the forward runs layer-wise (TransformerGNN.forward_chunked)


@torch.no_grad()
def solve_with_model(model: TransformerGNN, scene: Scene, graph: GraphSettings, decoder: str = "greedy",
                     device: torch.device | str = "cpu", amp_dtype: torch.dtype | None = None
                     ) -> tuple[SolveResult, dict[str, float]]:
    """The model's assignment of ``scene`` and the time split {build_s, forward_s, decode_s}; ``graph``:
    the settings the model was trained with (``load_model``); ``amp_dtype`` runs the forward under autocast."""
    device = torch.device(device)
    k = graph.k(scene.n_uav)
    start = time.perf_counter()
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
    done = time.perf_counter()
    timing = {"build_s": built - start, "forward_s": forwarded - built, "decode_s": done - forwarded}
    result = SolveResult(assignment=assignment, objective=reward(scene, assignment), status="feasible",
                         solver=f"model ({decoder})", wall_time=done - start)
    return result, timing
