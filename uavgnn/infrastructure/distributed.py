"""Data-parallel training under ``torchrun`` or a scheduler's tasks: process group, rank roles and reductions.

``torchrun --nproc_per_node=K run.py ...`` starts K copies of ``run.py`` with
``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` set; a SLURM step of K tasks (``srun -n K``,
submitit's SLURM launcher with ``tasks_per_node``) starts them with
``SLURM_PROCID``/``SLURM_STEP_NUM_TASKS``/``SLURM_LOCALID`` instead, which
``scheduler_environment`` translates (rendezvous at the job's first host, a
port derived from the job id). ``init_from_launcher`` (called by ``run.py``
before Hydra composes anything) joins the process group — NCCL for CUDA
tensors, gloo for CPU tensors, so the same code is testable on a laptop — and
makes every rank use rank 0's timestamp for the Hydra run directory
(``UAVGNN_RUN_STAMP``, read by ``conf/config.yaml``): without it each rank
resolves its own ``${now:}`` and a run straddling a second gets two
directories, a known pitfall of Hydra + DDP. Launched as one process, every
function here is a no-op.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from uavgnn.infrastructure.errors import ConfigError
from uavgnn.infrastructure.nested import flatten

RUN_STAMP_ENV = "UAVGNN_RUN_STAMP"
GROUP_PID_ENV = "UAVGNN_DDP_PID"  # the process that joined the group: its children inherit the variables only


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def context() -> DistContext:
    """This process's place in the job (``rank 0 of 1`` outside ``torchrun``)."""
    if not (dist.is_available() and dist.is_initialized()):
        return DistContext()
    return DistContext(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``gpu[03-05,09],cpu1`` -> ``gpu03``, ``rack[1-2]-n[01-04]`` ->
    ``rack1-n01``."""
    first = re.split(r",(?![^\[]*\])", nodelist.strip())[0]
    return re.sub(r"\[([^\]]*)\]", lambda group: re.split(r"[,-]", group.group(1))[0], first)


# (rank, tasks, local rank, job id) variables of the processes a scheduler starts as the tasks of one step. SLURM's
# task count is the *step's* (srun sets it): a batch script has SLURM_NTASKS and SLURM_PROCID=0 too, and run from
# it directly, without srun, it is one process, not rank 0 of a group that will never come.
SCHEDULERS = {
    "SLURM": ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_JOB_ID"),
    "SUBMITIT_LOCAL": (
        "SUBMITIT_LOCAL_GLOBALID",
        "SUBMITIT_LOCAL_NTASKS",
        "SUBMITIT_LOCAL_LOCALID",
        "SUBMITIT_LOCAL_JOB_ID",
    ),
}


def scheduler_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``torch.distributed``'s variables for a process a scheduler started as one of several tasks of a job step
    (``srun`` / submitit's SLURM launcher: ``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS``, ``SLURM_LOCALID``, the
    rendezvous at the first host of ``SLURM_STEP_NODELIST``/``SLURM_JOB_NODELIST``; submitit's local executor:
    its ``SUBMITIT_LOCAL_*`` variables, on this host), port ``15000 + (job id + 101 step id) mod 20000``
    (``MASTER_ADDR``/``MASTER_PORT``, if set, win); empty when ``torchrun``'s are set, in an ``srun --pty`` shell
    or when the step has one task."""
    if "WORLD_SIZE" in env or "SLURM_PTY_PORT" in env:  # torchrun's own, or an `srun --pty` shell: one process
        return {}
    for kind, (rank, tasks, local, job) in SCHEDULERS.items():
        if rank in env and int(env.get(tasks, "1")) > 1:
            nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") if kind == "SLURM" else None
            job_id = int(re.sub(r"\D", "", env.get(job, "")) or 0) + 101 * int(env.get("SLURM_STEP_ID", "0") or 0)
            return {
                "RANK": env[rank],
                "WORLD_SIZE": env[tasks],
                "LOCAL_RANK": env.get(local, "0"),
                "MASTER_ADDR": env.get("MASTER_ADDR") or (first_host(nodes) if nodes else "localhost"),
                "MASTER_PORT": env.get("MASTER_PORT") or str(15000 + job_id % 20000),
            }
    return {}


def init_from_launcher() -> DistContext:
    """Join the process group when launched as one of several processes (``torchrun``: ``WORLD_SIZE`` > 1, or a
    scheduler's tasks: ``scheduler_environment``) and share rank 0's run stamp."""
    if os.environ.get(GROUP_PID_ENV, str(os.getpid())) != str(os.getpid()):
        return context()  # a process a rank started (a joblib sweep's worker): it inherited the variables, not the rank
    os.environ.update(scheduler_environment(os.environ))
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return context()
    os.environ[GROUP_PID_ENV] = str(os.getpid())
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        dist.init_process_group("cpu:gloo,cuda:nccl")
    else:
        dist.init_process_group("gloo")
    stamp = [time.strftime("%Y-%m-%d/%H-%M-%S")]
    dist.broadcast_object_list(stamp, src=0)
    os.environ.setdefault(RUN_STAMP_ENV, stamp[0])
    return context()


def quiet_other_ranks() -> None:
    """Rank 0 narrates; the other ranks log warnings and errors only (call after Hydra configured logging)."""
    if not context().is_main:
        logging.getLogger().setLevel(logging.WARNING)


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if context().enabled:
        dist.barrier()


@contextmanager
def main_rank_first() -> Iterator[None]:
    """Rank 0 runs the block first (e.g. builds the graph cache) while the others wait, then they
    run it (and load what rank 0 wrote): never K concurrent builds of the same cache entry."""
    ctx = context()
    if ctx.enabled and not ctx.is_main:
        dist.barrier()
    yield
    if ctx.enabled and ctx.is_main:
        dist.barrier()


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """Element-wise sum over ranks, on the device (no host read; identity for one process)."""
    if not context().enabled:
        return values
    values = values.clone()
    dist.all_reduce(values)
    return values


def broadcast_from_main(value):
    """Rank 0's ``value`` on every rank (a picklable object), e.g. the validation result."""
    if not context().enabled:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def same_config_on_every_rank(config: dict[str, Any]) -> None:
    """Every rank of a job must train the same (resolved) config: ranks handed different hyperparameters - a
    sweeper or a resolver that differs per process - stop before training with one line naming the keys."""
    if not context().enabled:
        return
    configs: list[Any] = [None] * context().world_size
    dist.all_gather_object(configs, flatten(config))
    for rank, other in enumerate(configs[1:], start=1):
        differ = sorted(key for key in configs[0].keys() | other.keys() if configs[0].get(key) != other.get(key))
        if differ:
            shown = ", ".join(f"{key}={other.get(key)!r} (rank 0: {configs[0].get(key)!r})" for key in differ[:4])
            raise ConfigError(
                f"the ranks of this job were handed different configs: rank {rank} has {shown}; every "
                "rank must train the same config (pass the same overrides to every process)"
            )


def agree_on_step(
    loss: torch.Tensor, weight: Any, stats: dict[str, torch.Tensor], stop_seen: bool
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor], torch.Tensor, bool]:
    """One reduction per DDP step, so every rank skips the same non-finite steps and stops at the same step on
    a signal (the one host read of a step under DDP), and the loss is weighted by this rank's share of the
    batch's ``weight`` (items its loss averages over), so DDP's gradient average is exactly the full batch's
    mean. Returns the loss to differentiate, the batch's mean loss and stats, whether every rank's loss is
    finite (a device bool), whether any rank stops."""
    device, world = loss.device, context().world_size
    n = torch.as_tensor(weight, device=device).to(torch.float64).reshape(())
    own = loss.detach().to(torch.float64)
    bad, stops, n_all, loss_sum, *sums = all_reduce_sum(
        torch.stack(
            [
                (~torch.isfinite(own)).to(torch.float64),
                torch.full((), float(stop_seen), dtype=torch.float64, device=device),  # a fill: no host copy
                n,
                torch.nan_to_num(own) * n,
                *(v.detach().to(torch.float64) * n for v in stats.values()),
            ]
        )
    )
    n_all = n_all.clamp(min=1.0)  # 0 only when every rank's loss is NaN (nothing covered): skipped
    mean_stats = {name: total / n_all for name, total in zip(stats, sums)}
    return loss * (n * world / n_all).to(loss.dtype), loss_sum / n_all, mean_stats, bad == 0, bool(stops > 0)
