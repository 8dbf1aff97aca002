"""Run a model over a split, decode, and score against the MILP labels (one metrics function)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from uavgnn.data.loader import InMemoryLoader
from uavgnn.data.store import GraphStore
from uavgnn.inference.decoders import decode
from uavgnn.inference.refinement import refined_log_probs
from uavgnn.inference.scene import CHUNK_EDGES
from uavgnn.infrastructure.device import autocast, eval_mode
from uavgnn.models.policy import balancing_of
from uavgnn.problem.metrics import assignment_metrics

BATCH_SCENES = 256  # scenes a batch when a split is scored


@dataclass
class Evaluation:
    metrics: dict[str, np.ndarray]  # per scene, every DESIGN §1 metric
    assignments: list[np.ndarray]
    forward_s: float
    decode_s: float


@torch.no_grad()
def evaluate_model(
    model: nn.Module,
    store: GraphStore,
    decoder: str,
    k: int,
    device: torch.device,
    batch_size: int = BATCH_SCENES,
    amp_dtype: torch.dtype | None = None,
    samples: int = 16,
    repair: bool = False,
    reference: np.ndarray | None = None,
    rounds: int | None = None,
) -> Evaluation:
    """Decode every scene of ``store`` and score it; ``optimality_gap`` is against ``reference`` (per scene),
    by default the label MILP's objective; ``rounds``: the refinement rounds to run (None: the model's own). The
    forward runs layer-wise in cache-sized blocks (``CHUNK_EDGES``: the same numbers, faster at every scale on the
    CPU, BENCHMARKS.md)."""
    assignments: list[np.ndarray] = []
    forward_s = decode_s = 0.0
    with eval_mode(model):
        for batch in InMemoryLoader(store, batch_size, shuffle=False):
            batch = batch.to(device)
            start = time.perf_counter()
            with autocast(device, amp_dtype):
                cand_logp, idle_logp, keep = refined_log_probs(model, batch, k, rounds=rounds, max_edges=CHUNK_EDGES)
            if device.type == "cuda":
                torch.cuda.synchronize()
            forward_s += time.perf_counter() - start
            start = time.perf_counter()
            scenes = [store.scene(int(i)) for i in batch.scene_id] if decoder == "sample" or repair else None
            assignments += decode(
                decoder, batch, cand_logp.float(), idle_logp.float(), keep, scenes, samples, repair, balancing_of(model)
            )
            decode_s += time.perf_counter() - start
    metrics = assignment_metrics(
        store.scenes(), assignments, store.objective.numpy() if reference is None else reference
    )
    return Evaluation(metrics, assignments, forward_s, decode_s)
