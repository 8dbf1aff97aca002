"""What the assignment policies' algorithms share: a TransformerGNN assignment policy trained on scene graphs.

- Data side (``SceneWorkload``): the cached MILP-labelled split of every curriculum stage, in
  ``BatchSource`` order, or scenes generated on the device every step (``data.source=generated``,
  ``FreshScenes``); a run that imitates first (``algorithm.imitation_steps``) takes the labelled split until
  then. Each batch carries its candidate budget ``batch.k``: the stage's k, jittered in training.
- Validation: the greedy-decoded policy against the MILP labels of the cached validation split;
  ``val/optimality_gap`` (minimised) selects ``best.pt``.
- Test phase: the best policy against the guided MILP, greedy, lap, min-cost flow and the MILP on the test
  split (``uavgnn.evaluation.methods``), with ``test_scene.png``.
- Checkpoints are assignment policies: ``load_policy`` reads one back for ``mode=eval``, ``mode=solve`` and
  ``algorithm.init_from``.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

import numpy as np
import torch
from torch import nn
from torch_geometric.data import Batch

from uavgnn.algorithms.base import Algorithm, AlgorithmConfig, Capabilities, Product, write_results
from uavgnn.algorithms.registry import describe, require, which
from uavgnn.config.settings import (
    batch_settings,
    controls,
    fresh_settings,
    graph_settings,
    split_settings,
    stage_mix,
    transformer,
)
from uavgnn.config.validation import AT_LEAST_1, ranged
from uavgnn.data.batches import BatchSource, jittered_k
from uavgnn.data.fresh_scenes import FreshScenes
from uavgnn.data.splits import load_split
from uavgnn.evaluation.assignments import evaluate_model
from uavgnn.evaluation.methods import INTERVAL_NOTE, SHOWN, compare_on_split
from uavgnn.inference.refinement import policy_rounds
from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.console import count, echo
from uavgnn.infrastructure.device import amp_dtype
from uavgnn.infrastructure.errors import CheckpointError, ConfigError
from uavgnn.models import TransformerGNN, model_from_config
from uavgnn.models.choices import imitation_loss
from uavgnn.models.transformer_gnn import TransformerGNNConfig
from uavgnn.problem.graphs import FEATURE_SET, READS_FEATURE_SETS, GraphSettings, with_budget
from uavgnn.problem.metrics import mean_metrics
from uavgnn.reporting.figures import SHARE, ZERO_UP, Compared, Curve, Score
from uavgnn.reporting.pictures import plot_assignments
from uavgnn.reporting.tables import format_table
from uavgnn.runs.checkpoints import checkpoint_path, kind, load_checkpoint, load_weights
from uavgnn.runs.layout import TEST_SCENE

log = logging.getLogger(__name__)
PRODUCT = Product(
    "assignment policy", "mode=eval ckpt=, mode=solve solver=model ckpt= and algorithm.init_from= take it"
)


@dataclass
class ScenePolicyConfig(AlgorithmConfig):
    init_from: Optional[str] = None  # checkpoint whose policy starts training (same model config), e.g. to fine-tune
    # optim.sync_free: the rounds of a greedy decode in a step (REINFORCE's baseline, between refinement rounds;
    # 35 needed at 256 UAVs)
    greedy_rounds: int = ranged(48, AT_LEAST_1)


class ScenePolicy(Algorithm):
    """The base of the algorithms that train an assignment policy (a TransformerGNN) on scenes."""

    produces = PRODUCT
    score = Score("val/optimality_gap")
    compared = Compared(
        (
            Score("best_val_optimality_gap", label="best val. gap to the MILP", percent=True, bounds=ZERO_UP),
            Score("test/optimality_gap", label="test gap to the MILP", percent=True, bounds=ZERO_UP),
            Score("test/reward", minimize=False, label="test reward"),
            Score("test/completion_score", minimize=False, label="test completion score", percent=True, bounds=SHARE),
            Score("graphs_per_s", minimize=False, label="graphs/s", bounds=ZERO_UP),
            Score("peak_mem_mb", label="peak memory (MB)", bounds=ZERO_UP),
        ),
        ("best_val_optimality_gap", "test/optimality_gap", "test/completion_score", "test/reward"),
        Curve("val/optimality_gap", "val gap to the MILP (%)", percent=True),
        Curve("perf/graphs_per_s", "graphs/s"),
    )
    capabilities = Capabilities(models={"transformer_gnn": TransformerGNNConfig}, stages=True, scene_splits=True)
    reads = ("task", "data", "curriculum", "eval")
    benchmarked = True
    resume_safe = ("algorithm.init_from",)  # where the run started from: read once, at step 0
    restart_hint = "start a new run from its weights with algorithm.init_from={path}"
    learns_labels: ClassVar[bool] = True  # the MILP's: fresh scenes (data.source=generated) cannot train it

    def __init__(self, cfg: Any, device: torch.device) -> None:
        super().__init__(cfg, device)
        # read once here: an OmegaConf lookup inside a compiled step breaks its graph
        self.dense_max_nodes = int(cfg.optim.dense_max_nodes)
        self.greedy_rounds = int(cfg.algorithm.greedy_rounds) if cfg.optim.sync_free else None

    @classmethod
    def without_labels(cls, cfg: Any) -> str | None:
        """Why fresh, unlabelled scenes (``data.source=generated``) cannot train it, or None if they can (one that
        learns the labels is pointed to those that do not)."""
        if not cls.learns_labels:
            return None
        learners = which(lambda algorithm: issubclass(algorithm, ScenePolicy) and not algorithm.learns_labels)
        return (
            f"data.source=generated with algorithm={cls.name}: fresh scenes have no MILP labels to imitate; use "
            f"{learners} (or data.source=cache)"
        )

    @classmethod
    def check(cls, cfg: Any) -> None:
        if cfg.algorithm.init_from and not checkpoint_path(cfg.algorithm.init_from).is_file():
            raise ConfigError(f"algorithm.init_from={cfg.algorithm.init_from}: no checkpoint there")
        generated = cfg.data.source == "generated" and cfg.get("mode", "train") in ("train", "profile")  # training
        problem = cls.without_labels(cfg) if generated else None
        if problem:
            raise ConfigError(problem)
        if generated and (cfg.task.name in ("file", "folder") or cfg.task.get("generator")):
            task = f"task.generator={cfg.task.generator}" if cfg.task.get("generator") else f"task={cfg.task.name}"
            raise ConfigError(
                f"data.source=generated with {task}: fresh scenes come from the built-in generators "
                "(task=uniform, clustered or mixed); add data.source=cache to train on the cached split "
                "of yours"
            )

    @classmethod
    def build_model(cls, cfg: Any) -> nn.Module:
        return model_from_config(transformer(cfg.model), cfg.optim.grad_checkpoint, cfg.optim.checkpoint_layers)

    @property
    def starts_trained(self) -> bool:
        return bool(self.cfg.algorithm.init_from)

    def initialize(self, model: nn.Module) -> None:
        if self.cfg.algorithm.init_from:  # before the data: a mismatch fails before any labelling
            load_initial_policy(model, self.cfg.algorithm.init_from, self.cfg.model, self.device)

    def workload(self, model: nn.Module) -> SceneWorkload:
        return SceneWorkload(self.cfg, self.device)

    def test(self, result: Any, out_dir: Path, logger: Any) -> float:
        cfg, model, device = self.cfg, result.model, self.device
        test_store = load_split(split_settings(cfg), "test")
        graph = graph_settings(cfg)
        rows, evaluation = compare_on_split(
            model,
            test_store,
            cfg.eval.decoder,
            graph,
            graph.k(cfg.data.n_uav),
            device,
            amp_dtype(cfg, device),
            cfg.eval.samples,
            cfg.eval.repair,
            controls(cfg, best_of=False),
        )
        low, high = (int(f(test_store.tensors["n_uav"])) for f in (torch.min, torch.max))
        uavs = count(high, "UAV") if low == high else f"{low}-{high} UAVs"
        source = f"task.folder={cfg.task.folder}" if cfg.task.get("folder") else cfg.task.positions
        echo(
            f"\nTest set: {count(len(test_store), 'scene')} of {uavs} ({source})\n"
            + format_table(rows, [*SHOWN, "infeasible", "time_s", "note"])
            + "\n"
            + INTERVAL_NOTE
        )
        plot = model_vs_milp_picture(test_store, evaluation, cfg.model.name, out_dir / TEST_SCENE)
        logger.log_image("test/scene", plot, result.state.step)
        test = {f"test/{key}": value for key, value in rows[0].items() if isinstance(value, float)}
        return write_results(result, out_dir, logger, rows, test)


class SceneWorkload:
    """Labelled scene graphs: one training and one validation split per curriculum stage; with
    ``imitation_steps``, the labelled training split until then and ``data.source``'s batches after, from their
    own step 0 (as a run started at that step would see them)."""

    unit = "graphs"

    def __init__(self, cfg: Any, device: torch.device, imitation_steps: int = 0) -> None:
        self.cfg, self.device, self.imitation_steps = cfg, device, imitation_steps
        self.graph = graph_settings(cfg)
        self.sizes = list(cfg.curriculum.stages) if cfg.curriculum.name != "none" else [cfg.data.n_uav]
        generated = cfg.data.source == "generated"
        labelled = not generated or imitation_steps > 0
        with distributed.main_rank_first():  # one split per curriculum stage (just data.n_uav without one)
            splits = split_settings(cfg)
            self.stage_train = [load_split(splits, "train", n_uav=n) for n in self.sizes] if labelled else []
            self.stage_val = [load_split(splits, "val", n_uav=n) for n in self.sizes]
        batch_size = cfg.hardware.batch_size
        if labelled and isinstance(batch_size, int) and len(self.stage_train[-1]) < batch_size:
            scenes = len(self.stage_train[-1])
            what = (
                f"task.folder={cfg.task.folder}: its train split has {scenes} scenes,"
                if cfg.task.get("folder")
                else f"data.train_scenes={scenes} is"
            )
            raise ConfigError(
                f"{what} fewer than hardware.batch_size={batch_size} (the scenes of one step): lower "
                "hardware.batch_size"
            )
        mix = stage_mix(cfg)
        cached = BatchSource(batch_settings(cfg), mix, self.sizes, self.stage_train, device) if labelled else None
        self.batches = FreshScenes(fresh_settings(cfg), mix, self.sizes, device) if generated else cached
        self.labelled = cached  # the imitation steps' batches
        self.k_seen = 0  # the last batch's candidate budget, logged as train/k

    def k(self, stage: int) -> int:
        return self.graph.k(self.sizes[stage])

    def probe_store(self) -> Any:
        """Items ``hardware.batch_size=auto`` measures trial steps on (``gather(ids)`` gives a budgeted batch)."""
        items = self.batches if isinstance(self.batches, FreshScenes) else self.stage_train[-1]
        return Budgeted(items, self.k(len(self.sizes) - 1))

    def collect(self, step: int) -> None:
        """A dataset: nothing to collect."""

    def source_at(self, step: int) -> tuple[BatchSource | FreshScenes, int]:
        """Where step ``step``'s batch comes from, and its step there."""
        if step < self.imitation_steps:
            return self.labelled, step
        return self.batches, step - self.imitation_steps

    def restart(self, step: int, batch_size: int) -> None:
        source, at = self.source_at(step)
        source.restart(at, batch_size)

    def batch(self, step: int, stage: int, batch_size: int) -> Batch:
        """The step's batch with its candidate budget: its scenes' k, jittered by (seed, step)."""
        source, at = self.source_at(step)
        n_uav = source.n_uav_of(at, stage) if isinstance(source, FreshScenes) else self.sizes[stage]
        self.k_seen = jittered_k(self.graph.k(n_uav), self.cfg.data.k_jitter, self.cfg.seed, at, self.cfg.data.k_max)
        return with_budget(source.next(at, stage, batch_size), self.k_seen)

    def host_batches(self, start: int, batch_size: int) -> Iterator[Batch]:
        """The batches of steps ``start``, ``start + 1``, ... before any copy to the device (``mode=profile``
        times the copy), each with the step's budget; fresh scenes are made on the device."""
        stream = (
            self.batches.epochs(start, batch_size)
            if isinstance(self.batches, BatchSource)
            else (self.batches.next(step, 0, batch_size) for step in itertools.count(start))
        )
        for step, batch in enumerate(stream, start):
            yield with_budget(
                batch, jittered_k(self.k(0), self.cfg.data.k_jitter, self.cfg.seed, step, self.cfg.data.k_max)
            )

    def items(self, batch: Batch) -> int:
        return batch.num_graphs

    def feedback(self, batch: Batch, values: torch.Tensor | None) -> None:
        """Per-item values the algorithm returned; scene batches need none."""

    def window_stats(self) -> dict[str, float]:
        return {"train/k": self.k_seen}

    def validate(self, policy: nn.Module, stage: int, dtype: torch.dtype | None) -> dict[str, float]:
        result = evaluate_model(
            policy, self.stage_val[stage], self.cfg.train.decoder, self.k(stage), self.device, amp_dtype=dtype
        )
        return {f"val/{key}": value for key, value in mean_metrics(result.metrics).items()}

    def describe(self, val: dict[str, float], stage: int, best: float) -> str:
        uavs = "your scenes" if self.cfg.task.get("folder") else f"{self.sizes[stage]} UAVs"
        return (
            f"val ({uavs}) optimality_gap {val['val/optimality_gap']:.4f} (best {best:.4f}), "
            f"completion_score {val['val/completion_score']:.3f}"
        )

    def checkpoint_extras(self) -> dict[str, Any]:
        return {"graph": asdict(self.graph)}

    def state_dict(self) -> dict[str, Any]:
        return {}  # batches are a pure function of (seed, step)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore (see ``state_dict``)."""


@dataclass
class Budgeted:
    """Trial items whose batches carry the candidate budget ``k`` (``hardware.batch_size=auto``)."""

    items: Any
    k: int

    def __len__(self) -> int:
        return len(self.items)

    def gather(self, ids: torch.Tensor) -> Batch:
        return with_budget(self.items.gather(ids), self.k)


def batch_imitation_loss(
    model: nn.Module, batch: Batch, dense_max_nodes: int = 0, greedy_rounds: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(NLL of the MILP's choices, accuracy, covered UAVs) of a labelled batch at its candidate budget
    (``dense_max_nodes``, ``greedy_rounds``: see ``policy_rounds``), the accuracy of the model's last round; a
    refining model's NLL is summed over its rounds: each learns to decide well from the one before."""
    losses = [
        imitation_loss(
            cand_logp, idle_logp, batch.cand_index[0, keep], batch.cand_label[keep], batch.busy, batch.node_type == 0
        )
        for cand_logp, idle_logp, keep in policy_rounds(
            model, batch, batch.k, dense_max_nodes=dense_max_nodes, greedy_rounds=greedy_rounds
        )
    ]
    nll = losses[0][0]
    for later in losses[1:]:
        nll = nll + later[0]
    return nll, losses[-1][1], losses[-1][2]


def first_difference(ours: list[np.ndarray], reference: list[np.ndarray]) -> int | None:
    """The first scene where two solvers' assignments differ (None if they never do)."""
    return next((i for i, (a, b) in enumerate(zip(ours, reference)) if not np.array_equal(a, b)), None)


def model_vs_milp_picture(store: Any, evaluation: Any, model_name: str, path: Path) -> Path:
    """The model's and the MILP's assignments side by side on a test scene where the model's reward is below the
    MILP's (its gap 0.01% or more, as the caption prints it): the one of median gap among those, a typical miss
    rather than the first (often a near-tie); where there is none, the first where their assignments differ at
    the same reward; where they never differ, the first scene."""
    labels = store.label_assignments()
    gaps = np.asarray(evaluation.metrics["optimality_gap"], dtype=float)
    below = np.flatnonzero(np.round(gaps, 4) > 0)
    differs = first_difference(evaluation.assignments, labels)
    scenes = count(len(labels), "test scene")
    if len(below):
        i = int(below[np.argsort(gaps[below], kind="stable")[len(below) // 2]])
        note = (
            f"test scene {i}: the {model_name} model's reward is {gaps[i]:.2%} below the MILP's (the median of its "
            f"{len(below)} misses in {scenes})"
        )
    elif differs is not None:
        i = differs
        note = (
            f"test scene {i}: the {model_name} model assigns otherwise than the MILP for the same reward "
            f"(its reward is the MILP's on all {scenes})"
        )
    else:
        i = 0
        note = f"test scene 0: the {model_name} model's assignment is the MILP's on all {scenes}"
    return plot_assignments(
        store.scene(i), {f"{model_name} model": evaluation.assignments[i], "MILP": labels[i]}, path, note
    )


def load_policy(
    path: str | Path, device: torch.device | str = "cpu", taker: str = "ckpt"
) -> tuple[TransformerGNN, GraphSettings, dict[str, Any]]:
    """The assignment policy of a checkpoint (architecture from its stored config), the graph settings it was
    trained with (build its graphs with them) and its config; ``taker`` names what asked (for the errors)."""
    ckpt = load_checkpoint(path, device)
    require(ckpt, path, PRODUCT, taker)
    model = model_from_config(transformer(ckpt["config"]["model"])).to(device)
    load_weights(model, ckpt["policy"], path, describe(ckpt["config"]))
    try:
        graph = GraphSettings(**{"features": "rel-v2", **ckpt["graph"]})  # rel-v2: before the set was recorded
    except (KeyError, TypeError) as err:
        raise CheckpointError(f"checkpoint {path} ({kind(ckpt['config'])}): no valid graph settings ({err})") from None
    _check_features(path, graph.features)
    return model.eval(), graph, ckpt["config"]


def load_initial_policy(model: TransformerGNN, path: str, model_cfg: Any, device: torch.device) -> None:
    """Start from a checkpoint's policy (``algorithm.init_from``), e.g. imitation weights to fine-tune."""
    ckpt = load_checkpoint(path, device)
    require(ckpt, path, PRODUCT, "algorithm.init_from")
    if "graph" in ckpt:
        _check_features(path, ckpt["graph"].get("features", "rel-v2"))
    stored = ckpt["config"]["model"]
    differ = [
        f"model.{key}={model_cfg[key]} (checkpoint: {stored.get(key)})"
        for key in ("hidden", "heads", "layers", "ffn_mult")
        if stored.get(key) != model_cfg[key]
    ]
    if bool(stored.get("relaxation", False)) != bool(model_cfg.get("relaxation", False)):
        differ.append(
            f"model.relaxation={model_cfg.get('relaxation', False)} (checkpoint: {stored.get('relaxation', False)})"
        )
    if stored.get("refine_rounds", 0) and not model_cfg.get("refine_rounds", 0):  # plain -> refining is fine
        differ.append(f"model.refine_rounds=0 (checkpoint: {stored['refine_rounds']})")
    if differ:
        raise ConfigError(
            f"algorithm.init_from={path} was trained with another architecture: {', '.join(differ)}; "
            f"use model={stored.get('name')}"
        )
    # a refining model may start from a plain policy: its assignment input starts at zero, as the plain model
    fresh = {key: value for key, value in model.state_dict().items() if key.startswith("assignment_encoder.")}
    load_weights(model, {**fresh, **ckpt["policy"]}, path, describe(ckpt["config"]))
    log.info("algorithm.init_from: starting from the policy of %s", path)


def _check_features(path: str | Path, features: str) -> None:
    if features not in READS_FEATURE_SETS:
        raise CheckpointError(
            f"checkpoint {path}: trained on graph features {features!r}, but this version builds "
            f"{FEATURE_SET!r}; its outputs would be meaningless: retrain it (or use the uavgnn "
            "version it was trained with)"
        )
