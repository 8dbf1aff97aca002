"""What an algorithm is: a plug-in declared in one file, which the loop, the modes and validation ask.

The shared loop (``uavgnn.training.trainer.Trainer``) owns what every algorithm needs: device and precision,
DDP, compile, EMA, the optimisers and LR schedule, checkpoints and resume, logging, OOM halving, divergence
rollback, signals and progress. An algorithm (a subclass of ``Algorithm`` in ``uavgnn/algorithms/<name>.py``,
found by the registry in ``uavgnn.algorithms``) declares everything else, in one place:

- ``name`` and ``config``: its structured config, the schema of ``algorithm/<name>`` (``algorithm=<name>``
  composes its keys only: another algorithm's key is a typo error naming it);
- ``build_model``: its networks; ``networks``: one optimiser each (its parameters, LR multiple and clip);
- ``workload``: its data side (what each step trains on, how the policy is validated) and ``cadence``: how
  often the loop collects new experience (off- and on-policy algorithms); ``phases``: the parts of a run with
  their own objective and LR schedule (one by default; imitation then REINFORCE);
- ``draws``: what a step draws at random (from its named streams, before the step: TorchDynamo cannot trace a
  ``torch.Generator``); ``training_step``: the loss of a batch; ``after_step``: e.g. target networks;
- ``capabilities``: what it can train (model kinds, environment actions, on- or off-policy, a centralised
  critic, curriculum stages, scene splits, ``hardware.batch_size=auto``), checked against the config in one
  place (``uavgnn.algorithms.registry.check_config``) before ``check``, its own rules (call ``super().check``);
- ``score``: the validation metric that selects ``best.pt``, with its direction;
- ``test``: the test phase after training (its tables and pictures); ``produces``: what its checkpoints are
  (a ``Product``: what else takes them); ``compared``: what ``mode=compare`` shows of its runs (its final
  figures with their directions, its curves); ``summary``: its line in ``uavgnn --help``.

``mode=profile``, ``mode=benchmark`` and ``hardware.batch_size=auto`` call the same ``training_step``.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
from omegaconf import MISSING
from torch import nn

from uavgnn.infrastructure.console import echo
from uavgnn.infrastructure.device import autocast
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.infrastructure.randomness import declare
from uavgnn.infrastructure.storage import write_json
from uavgnn.reporting.figures import Compared, Score
from uavgnn.runs.layout import SUMMARY
from uavgnn.runs.manifest import run_manifest

LossOf = Callable[[nn.Module, Any], torch.Tensor]  # (model, batch) -> a training step's loss


@dataclass(frozen=True)
class Product:
    """What an algorithm's checkpoints are (``name``: an assignment policy, ...) and what takes them (``takers``:
    for the errors that refuse them elsewhere)."""

    name: str
    takers: str

    def __str__(self) -> str:
        return self.name

    @property
    def with_article(self) -> str:
        """``an assignment policy``, ``a dynamics model``."""
        return ("an " if self.name[0] in "aeiou" else "a ") + self.name


@dataclass(frozen=True)
class Capabilities:
    """What an algorithm can train, as BenchMARL's algorithm configs declare it; the registry checks the config
    against it before any work (``check_config``), so its own ``check`` holds only its own rules."""

    # its networks' model kinds (``model=`` options by their schema: kind -> schema dataclass); None: it builds
    # networks of its own and reads no ``model`` group
    models: dict[str, type] | None = None
    actions: tuple[str, ...] = ()  # the env.action kinds it acts with (continuous, discrete, goto); (): none
    on_policy: bool = False  # it learns from the episodes its current policy just played (no replay)
    centralised_critic: bool = False  # a critic of the global state (or of every agent) trains beside its actors
    auto_batch_size: bool = True  # hardware.batch_size=auto finds its batch (off: a batch is episodes)
    stages: bool = False  # it trains through curriculum stages of scene sizes
    scene_splits: bool = False  # it trains on the task's scene splits (task=folder applies)

    def model_options(self) -> list[str]:
        """The ``model=`` options its networks can be: a kind's own (``options``, e.g. a TransformerGNN's sizes),
        else the kind's name."""
        return [
            option for kind, schema in (self.models or {}).items() for option in getattr(schema, "options", (kind,))
        ]

    def describe(self) -> str:
        """What it can train, in a few words (``uavgnn --help`` shows it under the algorithm)."""
        said = [f"model={'|'.join(self.model_options())}"] if self.models else []
        said += [f"env.action={'|'.join(self.actions)}"] if self.actions else []
        said += ["on-policy" if self.on_policy else ("off-policy" if self.actions else "")]
        said += ["centralised critic" if self.centralised_critic else ""]
        said += ["curriculum stages" if self.stages else "", "task=folder" if self.scene_splits else ""]
        said += ["" if self.auto_batch_size else "hardware.batch_size: a number"]
        return "; ".join(part for part in said if part)


@dataclass
class AlgorithmConfig:
    """The key every algorithm's schema has; each adds its own (``conf/algorithm/<name>.yaml`` picks it)."""

    name: str = MISSING


@dataclass(frozen=True)
class Network:
    """One optimiser's share of the model: its parameters, LR (``train.lr`` x ``lr_scale``) and gradient clip
    (the largest global norm of its gradients; None: ``train.grad_clip``)."""

    name: str
    params: list[nn.Parameter]
    lr_scale: float = 1.0
    grad_clip: float | None = None


@dataclass(frozen=True)
class Cadence:
    """When the loop collects new experience: before every ``updates``-th update (0: never, a fixed dataset)."""

    updates: int = 0


@dataclass(frozen=True)
class Phase:
    """A part of the run with its own objective and LR schedule, steps [``start``, ``end``): its LR warms up over
    ``warmup`` steps to ``lr``, then follows ``train.schedule`` to ``end``. At the start of every phase but the
    first the loop restarts from the best policy so far (``best.pt``'s) with fresh optimisers, as a new run
    started from that checkpoint would."""

    name: str
    start: int
    end: int
    lr: float
    warmup: int


@dataclass
class StepOutput:
    loss: torch.Tensor  # scalar to minimise
    stats: dict[str, torch.Tensor]  # scalars logged as train/<name> (window means)
    weight: torch.Tensor  # how many items (UAVs) the loss averages over: DDP weighs the ranks by it
    feedback: torch.Tensor | None = None  # per-item values for the data source (replay priorities)


@runtime_checkable
class Trained(Protocol):
    """What the loop reads of every algorithm's networks (``build_model``'s module): how many parameters it
    trains (a target network's copies not counted), for the log, the dashboard and ``summary.json``."""

    def num_parameters(self) -> int: ...


@runtime_checkable
class EnvAgents(Trained, Protocol):
    """An environment policy's networks (what ``produces = "environment policy"`` promises): ``act`` for the
    environment's observations (E, N, ...) and its available actions (``available_actions()``; a policy whose
    actions are all available may take None), sampled with ``generator``, the most likely without; ``play``, the
    policy as validation, the test phase and ``load_env_policy`` run it; ``acting``, the networks ``play`` reads
    (all a checkpoint needs to play)."""

    acting: tuple[str, ...]

    def act(self, obs: torch.Tensor, avail: torch.Tensor | None, generator: torch.Generator | None) -> torch.Tensor: ...
    def play(self, env: Any, generator: torch.Generator | None = None) -> torch.Tensor: ...


@runtime_checkable
class Workload(Protocol):
    """An algorithm's data side: what each step trains on and how the policy is validated."""

    unit: str  # what an item is ("graphs", "samples", "episodes"): hardware.batch_size counts them per update
    sizes: list[int]  # UAVs per curriculum stage

    def collect(self, step: int) -> None: ...
    def batch(self, step: int, stage: int, batch_size: int) -> Any: ...
    def restart(self, step: int, batch_size: int) -> None: ...
    def items(self, batch: Any) -> int: ...
    def feedback(self, batch: Any, values: torch.Tensor | None) -> None: ...
    def window_stats(self) -> dict[str, float]: ...
    def validate(self, policy: nn.Module, stage: int, dtype: torch.dtype | None) -> dict[str, float]: ...
    def describe(self, val: dict[str, float], stage: int, best: float) -> str: ...
    def checkpoint_extras(self) -> dict[str, Any]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def probe_store(self) -> Any: ...


@runtime_checkable
class DatasetWorkload(Workload, Protocol):
    """The data side of an algorithm that trains on a fixed dataset (``cadence().updates == 0``): its batches
    as the host makes them, before their copy (what ``mode=profile`` times)."""

    def host_batches(self, start: int, batch_size: int) -> Iterator[Any]: ...


class Algorithm(ABC):
    """One objective, readable top to bottom in its own file (see the module's docstring)."""

    name: ClassVar[str]
    config: ClassVar[type]
    produces: ClassVar[Product]
    capabilities: ClassVar[Capabilities] = Capabilities()  # what it declares it can train (nothing checked here)
    score: ClassVar[Score]
    compared: ClassVar[Compared]  # what mode=compare shows of its runs
    # the shared groups a training run of it reads (of SHARED_GROUPS; the others are left out of its config)
    reads: ClassVar[tuple[str, ...]] = ("task", "env", "data", "curriculum", "eval")
    resume_safe: ClassVar[tuple[str, ...]] = ()  # its keys a resumed run may change (they never change a step)
    restart_hint: ClassVar[str] = "start a new run in another directory (hydra.run.dir=...)"  # {path}: last.pt
    # what measures its speed: mode=benchmark's sections (the scene-assignment pipeline: cache, loader, toggles,
    # scaling, the MILP) when they apply to it; else where mode=profile, which times steps on a fixed dataset,
    # sends one that collects experience as it trains (its own benchmark script, or its run's perf/ figures)
    benchmarked: ClassVar[bool] = False
    timed_by: ClassVar[str] = "the perf/ figures of its training run (metrics.jsonl, the dashboard)"  # or a command

    streams: ClassVar[
        dict[str, str]
    ] = {}  # its own random streams, {purpose: what it draws} (uavgnn.infrastructure.randomness)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in vars(cls):  # a registered algorithm's streams, known before it draws
            declare(cls.name, vars(cls).get("streams", {}))

    def __init__(self, cfg: Any, device: torch.device) -> None:
        self.cfg, self.device = cfg, device

    @classmethod
    def summary(cls) -> str:
        """What it is, in one line (``uavgnn --help`` lists it): its module docstring's first line, after the
        ``algorithm=<name>`` that starts it by convention (``algorithm=coma``: counterfactual ...), without the
        full stop."""
        first = (sys.modules[cls.__module__].__doc__ or "").strip().split("\n", 1)[0]
        return (first.split(": ", 1)[1] if first.startswith("``algorithm=") and ": " in first else first).rstrip(".")

    @classmethod
    def check(cls, cfg: Any) -> None:
        """Its config rules beyond the schema's types and ranges and its ``capabilities`` (checked before); a
        ``ConfigError`` naming the key. A subclass calls ``super().check(cfg)`` first."""

    @classmethod
    @abstractmethod
    def build_model(cls, cfg: Any) -> nn.Module:
        """Its networks, sized by the config (a checkpoint's stored config rebuilds them)."""

    def initialize(self, model: nn.Module) -> None:
        """A new run's starting weights beyond the initialisation (e.g. a checkpoint to fine-tune); none here."""

    @property
    def starts_trained(self) -> bool:
        """Whether ``initialize`` loads trained weights: the starting policy is then validated and is best.pt."""
        return False

    @abstractmethod
    def workload(self, model: nn.Module) -> Workload:
        """Its data side."""

    def cadence(self) -> Cadence:
        return Cadence()

    def phases(self) -> list[Phase]:
        """The run's phases in order (the last ends at ``train.steps``): one, at ``train.lr``, by default."""
        train = self.cfg.train
        return [Phase(self.name, 0, int(train.steps), float(train.lr), int(train.warmup_steps))]

    def networks(self, model: nn.Module) -> list[Network]:
        """One optimiser per network; one for the whole model by default."""
        return [Network("model", list(model.parameters()))]

    def draws(self, batch: Any, step: int) -> Any:
        """What step ``step`` draws at random for ``batch`` (noise tensors from its named streams), made eagerly
        before the step so that a compiled step is one graph; a pure function of (seed, step, rank), so a
        resumed run draws the same. None by default."""
        return None

    @abstractmethod
    def training_step(self, model: nn.Module, batch: Any, draws: Any) -> StepOutput:
        """The loss of ``batch`` with the step's ``draws``; a pure function of (weights, batch, draws), so a
        resumed run repeats exactly what an uninterrupted one computes, and ``optim.compile`` compiles it whole
        (forward and loss, then the backward through AOTAutograd)."""

    def after_step(self, model: nn.Module, applied: torch.Tensor) -> None:
        """Called after each optimiser step (e.g. target-network averaging), with whether its update was
        applied (a device bool: false after a non-finite loss; read it on the device, not the host); nothing by
        default."""

    def state_dict(self) -> dict[str, Any]:
        """What this algorithm adds to a checkpoint (its own buffers, counters); nothing by default."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (resume and rollback)."""

    @abstractmethod
    def test(self, result: Any, out_dir: Path, logger: Any) -> float:
        """The test phase after training: tables, pictures, ``summary.json``; returns the best validation score."""

    @classmethod
    def self_check(cls, device: torch.device) -> bool:
        """``mode=info``: one tiny update of its own on ``device`` (raises if it cannot run there); returns
        whether it has one (the shared ones - a TransformerGNN step - are ``mode=info``'s own)."""
        return False

    def prepare(self) -> list[dict[str, Any]]:
        """``mode=rollouts``: build its datasets ahead of training and describe them; most have none to build."""
        raise ConfigError(
            f"mode=rollouts builds the datasets of algorithms that simulate them; algorithm={self.name} "
            "has none to build ahead"
        )


class AlgorithmStep(nn.Module):
    """The algorithm's step as a module's forward, ``(batch, draws) -> StepOutput``: what DDP wraps (it averages
    the gradients of its forward's graph) and ``optim.compile`` compiles, while the loss stays the algorithm's
    (``training_step``)."""

    def __init__(self, model: nn.Module, algorithm: Algorithm) -> None:
        super().__init__()
        self.model, self.algorithm = model, algorithm

    def forward(self, batch: Any, draws: Any) -> StepOutput:
        return self.algorithm.training_step(self.model, batch, draws)


def write_results(result: Any, out_dir: Path, logger: Any, rows: list[dict[str, Any]], test: dict[str, float]) -> float:
    """What every test phase ends with: the table and the headline test figures on the dashboard, and
    ``summary.json`` (the best validation score, by its name, the final validation, the test table, the
    run's counts and speed, the run manifest); returns the best validation score."""
    best = f"best_{result.score.key.replace('/', '_')}"
    step = result.state.step
    logger.table("test/methods", rows, step)
    device = next(result.model.parameters()).device
    write_json(
        out_dir / SUMMARY,
        {
            best: result.state.best,
            "final_val": result.val,
            "test": rows,
            "steps": step,
            "params": result.model.num_parameters(),
            **test,
            **result.perf,
            "manifest": run_manifest(device),
        },
    )
    logger.summary({f"best/{result.score.key}": result.state.best, **test, **result.perf})
    echo(f"results in {out_dir}")
    return float(result.state.best)


def step_loss(algorithm: Algorithm, device: torch.device, dtype: torch.dtype | None) -> LossOf:
    """The algorithm's loss under autocast, as ``hardware.batch_size=auto``, ``mode=profile`` and
    ``mode=benchmark`` measure it (at the first step of its last phase: what they time does not depend on the
    step, only on the phase's objective)."""
    start = algorithm.phases()[-1].start

    def loss_of(model: nn.Module, batch: Any) -> torch.Tensor:
        with autocast(device, dtype):
            return algorithm.training_step(model, batch, algorithm.draws(batch, start)).loss

    return loss_of
