"""``optim.cuda_graphs``: each training update - forward, loss, backward, clipping, the optimisers' step -
captured once per batch shape as one CUDA graph and replayed: one launch a step instead of hundreds, the GPU
never waiting on Python (the whole-network capture of PyTorch's CUDA-graphs recipe; LeanRL does the same).

A graph replays fixed kernels on fixed addresses, so the update must read no host value (``optim.sync_free``,
the dense attention path on padded batches: the last eager step of a shape runs under
``torch.cuda.set_sync_debug_mode("error")``, and an update that reads the host stays eager, said in one
warning) and its inputs must live at fixed addresses: each step's batch and draws are copied
into the static copies the graph was captured on. The optimisers are capturable, their learning rates device
tensors updated in place (``Optimisers(capturable=True)``).

Per shape (the batch's tensor shapes and its host values: a curriculum stage, a candidate budget k), the
first ``WARMUP`` steps run eagerly on a side stream (real steps; CUDA graphs ask for it), the next is captured
and replayed, and every later one is replayed. The moving average, target networks and statistics run after
the replay, eagerly. Graphs share one memory pool: a replay's only outputs that
outlive it are read before the next replay starts (same stream). New optimisers or a restored state
(resume, rollback, a phase's restart) drop every graph: its kernels point at the old state tensors.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

WARMUP = 3  # eager steps of a shape before its capture
MAX_SHAPES = 1024  # signatures remembered while waiting for their capture


def cuda_graphs_refusal(
    device: torch.device, data_parallel: bool, grad_scaler: bool, grad_checkpoint: bool
) -> str | None:
    """Why a run cannot replay its updates as CUDA graphs, or None when it can."""
    if device.type != "cuda":
        return f"CUDA graphs need CUDA, this run is on {device.type}"
    if data_parallel:
        return "not under torchrun: DDP's gradient buckets are not captured here"
    if grad_scaler:
        return "fp16's gradient scaler reads its inf check on the host: use hardware.precision=bf16"
    if grad_checkpoint:
        return "optim.grad_checkpoint recomputes with saved RNG states"
    return None


def leaves(obj: Any) -> tuple[list[torch.Tensor], tuple]:
    """The tensors of a batch or draws (tensors, dicts, sequences, dataclasses, PyG batches), in a fixed
    order, and their signature: shapes, dtypes and every host value - two inputs with one signature replay
    one graph."""
    tensors: list[torch.Tensor] = []

    def walk(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            tensors.append(value)
            return ("tensor", tuple(value.shape), value.dtype, value.device)
        if isinstance(value, dict):
            return ("dict", tuple((key, walk(value[key])) for key in sorted(value)))
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, tuple(walk(v) for v in value))
        if dataclasses.is_dataclass(value):
            return (
                type(value).__name__,
                tuple((f.name, walk(getattr(value, f.name))) for f in dataclasses.fields(value)),
            )
        stores = getattr(value, "stores", None)  # a PyG Data / Batch: its attributes, tensors or host values
        if stores is not None:
            return (
                type(value).__name__,
                tuple(walk(dict(store.items())) for store in stores),
                getattr(value, "_num_graphs", None),
            )
        return value

    return tensors, walk(obj)


class GraphedUpdate:
    """``graphed(batch, draws, stop_seen)`` = ``update(batch, draws, stop_seen)``, replayed from a CUDA graph
    per input signature."""

    def __init__(self, update: Callable[..., Any], optimisers: Callable[[], Any], device: torch.device) -> None:
        self.update, self.optimisers = update, optimisers
        self.stream = torch.cuda.Stream(device)
        self.pool = torch.cuda.graph_pool_handle()
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, list[torch.Tensor], Any]] = {}
        self.seen: Counter[tuple] = Counter()
        self.state_of: tuple[Any, int] | None = None  # (optimisers, their loads) the graphs were captured with
        self.failed: str | None = None  # the update reads the host: eager from then on

    def reset(self) -> None:
        """Drop every graph (their memory with them): new optimiser state, or a batch halved after an OOM."""
        self.graphs.clear()
        self.seen.clear()

    def __call__(self, batch: Any, draws: Any, stop_seen: bool = False) -> Any:
        if self.failed:
            return self.update(batch, draws, stop_seen)
        optimisers = self.optimisers()
        if self.state_of != (optimisers, optimisers.loads):
            self.reset()
            self.state_of = (optimisers, optimisers.loads)
        tensors, key = leaves((batch, draws))
        try:
            hash(key)
        except TypeError:  # a host value that cannot name a signature (an array): this step stays eager
            return self.update(batch, draws, stop_seen)
        if key not in self.graphs:
            if len(self.seen) > MAX_SHAPES:  # inputs whose host values change every step never capture
                self.seen.clear()
            self.seen[key] += 1
            if self.seen[key] < WARMUP:
                return self._on_side_stream(lambda: self.update(batch, draws, stop_seen))
            if self.seen[key] == WARMUP:  # the last eager step of this shape: any host read in it is an error
                return self._checked_warmup(batch, draws, stop_seen)
            try:
                self.graphs[key] = self._capture(batch, draws)
            except RuntimeError as err:  # an op CUDA graphs cannot hold
                if isinstance(err, torch.cuda.OutOfMemoryError):
                    raise
                return self._give_up(err.__context__ or err, batch, draws, stop_seen)
        graph, static, out = self.graphs[key]
        torch._foreach_copy_(static, tensors)
        graph.replay()
        return dataclasses.replace(out, stop_seen=stop_seen)

    def _on_side_stream(self, run: Callable[[], Any]) -> Any:
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            out = run()
        torch.cuda.current_stream().wait_stream(self.stream)
        return out

    def _checked_warmup(self, batch: Any, draws: Any, stop_seen: bool) -> Any:
        """An eager step under ``torch.cuda.set_sync_debug_mode("error")``: a host read makes the update
        uncapturable, so the run warns once and stays eager (the step runs again without the check; its
        weights had not moved: the read comes before the optimisers')."""
        torch.cuda.set_sync_debug_mode("error")
        try:
            return self._on_side_stream(lambda: self.update(batch, draws, stop_seen))
        except RuntimeError as err:
            if isinstance(err, torch.cuda.OutOfMemoryError):
                raise
            failure = err
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return self._give_up(failure, batch, draws, stop_seen)  # eager again, without the check

    def _give_up(self, err: BaseException, batch: Any, draws: Any, stop_seen: bool) -> Any:
        """The update cannot be a graph: say why once, then run this step and every later one eagerly."""
        torch.cuda.set_stream(torch.cuda.default_stream(self.stream.device))  # a failed capture may leave its own
        self.reset()
        self.failed = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}"
        warnings.warn(
            f"optim.cuda_graphs: the update cannot be captured ({self.failed}); continuing eagerly "
            "(optim.sync_free=true and optim.dense_max_nodes covering the scenes make a step without "
            "host reads)",
            RuntimeWarning,
            stacklevel=2,
        )
        self.optimisers().zero_grad()
        return self.update(batch, draws, stop_seen)

    def _capture(self, batch: Any, draws: Any) -> tuple[torch.cuda.CUDAGraph, list[torch.Tensor], Any]:
        """The update captured on static copies of ``batch`` and ``draws`` (not run: the caller replays it).
        ``thread_local``: a pinned-memory loader thread's host allocations do not break the capture."""
        static_batch, static_draws = copy.deepcopy(batch), copy.deepcopy(draws)
        static, _ = leaves((static_batch, static_draws))
        self.optimisers().zero_grad()  # the captured backward allocates the gradients in the graph's pool
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, stream=self.stream, capture_error_mode="thread_local"):
            out = self.update(static_batch, static_draws, capturing=True)
        return graph, static, out
