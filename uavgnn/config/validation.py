"""Value checks the schema's types cannot express, run before any work: each failure names the key.

``CHOICES`` lists the allowed strings, ``RANGES`` the valid interval of every
numeric key of the shared groups, and each algorithm's schema gives its own
keys' ranges where it declares them (``ranged``; a test checks that no numeric
key lacks one). ``validate`` adds the rules that relate several keys; each
algorithm adds its own (``Algorithm.check``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any

from omegaconf import OmegaConf

from uavgnn.config.modes import MODES
from uavgnn.envs import disruptions
from uavgnn.envs.settings import EnvSettings
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.infrastructure.storage import system_path_problem
from uavgnn.problem.scenes import SceneDistribution

CHOICES = {
    "mode": tuple(MODES),
    "solver": ("milp", "greedy", "lap", "mcf", "model", "guided", "pruned"),
    "solve.pruner": ("nearest", "value", "relaxation"),
    "action": ("info", "verify", "clear"),
    "task.positions": ("uniform", "clustered", "mixed"),
    "hardware.device": ("cpu", "cuda", "auto"),
    "hardware.loader": ("memory", "pyg"),
    "hardware.precision": ("bf16", "fp16"),
    "train.schedule": ("cosine", "plateau"),
    "train.decoder": ("argmax", "greedy"),
    "env.action": ("continuous", "discrete", "goto"),
    "env.obs_scale": ("side", "range"),
    "hardware.data_on_device": ("auto", "true", "false"),
    "data.source": ("cache", "generated"),
    "curriculum.batch_policy": ("by_scale", "nodes", "fixed"),
    "eval.decoder": ("argmax", "greedy", "sample"),
    "logger.name": ("wandb", "tensorboard", "jsonl", "none"),
    "logger.mode": ("offline", "online", "disabled"),
}
# keys whose every item must be one of these (the pruners: ``solvers.pruned.PRUNERS`` and the model's own)
ITEM_CHOICES = {"eval.pruners": ("model", "nearest", "value", "relaxation")}


@dataclass(frozen=True)
class Range:
    """The valid values of a numeric key (NaN and infinities are never valid)."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return math.isfinite(value) and above and below

    def __str__(self) -> str:
        if math.isinf(self.high):
            return f"must be {'>' if self.low_open else '>='} {self.low:g}"
        return f"must be in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"


AT_LEAST_1, NON_NEGATIVE, POSITIVE = Range(1), Range(0), Range(0, low_open=True)
FRACTION, UNIT = Range(0, 1, high_open=True), Range(0, 1)
SEED = Range(0, 2**32 - 1)
MAX_ENVS = 2**20  # parallel environments in one process; more is a typo (each holds its state and replay rows)
# every numeric key of the schema (list keys: each element); the test suite checks that none is missing
RANGES: dict[str, Range] = {
    "seed": SEED,
    **{
        f"task.{key}": POSITIVE
        for key in ("density", "target_ratio", "value_min", "value_max", "range_min", "range_max")
    },
    **{f"task.{key}": AT_LEAST_1 for key in ("need_min", "need_max", "cluster_size")},
    **{f"task.{key}": NON_NEGATIVE for key in ("lam", "cluster_std", "uav_spread")},
    **{
        f"data.{key}": AT_LEAST_1
        for key in (
            "n_uav",
            "train_scenes",
            "val_scenes",
            "test_scenes",
            "k_min",
            "k_divisor",
            "k_max",
            "label_workers",
        )
    },
    "data.k_jitter": NON_NEGATIVE,
    "data.uav_neighbours": NON_NEGATIVE,
    "data.label_time_limit": POSITIVE,
    **{f"data.{split}_seed": SEED for split in ("train", "val", "test")},
    **{f"model.{key}": AT_LEAST_1 for key in ("hidden", "heads", "layers", "ffn_mult")},
    "model.dropout": FRACTION,
    "model.refine_rounds": NON_NEGATIVE,
    "model.capacity_iters": NON_NEGATIVE,
    "model.capacity_fill": Range(0, 1, low_open=True),
    "model.commit_stages": NON_NEGATIVE,
    **{f"hardware.{key}": AT_LEAST_1 for key in ("max_batch_size", "prefetch_factor", "sweep_jobs")},
    **{f"hardware.{key}": NON_NEGATIVE for key in ("memory_limit_mb", "num_workers", "threads")},
    "hardware.memory_fraction": Range(0, 1, low_open=True),
    **{
        f"train.{key}": AT_LEAST_1
        for key in ("steps", "plateau_patience", "eval_every", "ckpt_every", "log_every", "max_bad_steps")
    },
    "train.lr": POSITIVE,
    "train.grad_clip": POSITIVE,
    "train.ema_decay": FRACTION,
    **{f"train.{key}": NON_NEGATIVE for key in ("weight_decay", "warmup_steps", "max_rollbacks")},
    **{f"env.{key}": AT_LEAST_1 for key in ("n_uav", "horizon", "val_episodes", "obs_targets", "obs_uavs")},
    "env.n_envs": Range(1, MAX_ENVS),
    **{f"env.{key}": POSITIVE for key in ("dt", "max_speed", "max_accel", "service_radius")},
    **{
        f"env.{key}": NON_NEGATIVE
        for key in (
            "collision_radius",
            "appear_steps",
            "collision_penalty",
            "exhausted_penalty",
            "approach_reward",
            "collision_hint",
        )
    },
    "env.team_weight": UNIT,
    "env.train_sizes": AT_LEAST_1,
    "env.wind": NON_NEGATIVE,
    "env.drag": NON_NEGATIVE,
    "env.failures": UNIT,
    "env.comm_radius": NON_NEGATIVE,
    "env.comm_drop": Range(0, 1, high_open=True),
    "env.target_speed": NON_NEGATIVE,
    "env.late_appear_steps": NON_NEGATIVE,
    "env.disrupted_share": Range(0, 1, low_open=True),
    "env.obs_motion_weight": UNIT,
    "curriculum.advance_threshold": UNIT,
    "curriculum.performance_threshold": UNIT,
    **{
        f"curriculum.{key}": AT_LEAST_1
        for key in ("consecutive_evaluations", "patience", "consecutive_failures", "node_budget")
    },
    "curriculum.max_fallbacks": NON_NEGATIVE,
    "curriculum.learning_rate_decay": Range(0, 1, low_open=True),
    "profile.steps": AT_LEAST_1,
    "profile.warmup": NON_NEGATIVE,
    **{
        f"benchmark.{key}": AT_LEAST_1
        for key in (
            "repeats",
            "cache_scenes",
            "scenes",
            "pipeline_steps",
            "toggle_batch_size",
            "checkpoint_batch_size",
            "scaling_nodes",
            "milp_uavs",
        )
    },
    "benchmark.milp_time_limit": POSITIVE,
    "benchmark.expected_minutes": POSITIVE,
    "eval.scales": AT_LEAST_1,
    "eval.max_total_uavs": AT_LEAST_1,
    "eval.samples": AT_LEAST_1,
    "eval.episodes": AT_LEAST_1,
    "eval.milp_time_limit": POSITIVE,
    "eval.keeps": AT_LEAST_1,
    "eval.milp_budgets": POSITIVE,
    "eval.best_of": NON_NEGATIVE,
    "eval.capacity_iters": NON_NEGATIVE,
    "eval.k_max": AT_LEAST_1,
    "eval.capacity_fill": Range(0, 1, low_open=True),
    "eval.commit_stages": NON_NEGATIVE,
    "data.fresh_sizes": AT_LEAST_1,
    "solve.n_uav": AT_LEAST_1,
    "solve.time_limit": POSITIVE,
    "solve.keep": AT_LEAST_1,
    "logger.init_timeout": POSITIVE,
    "optim.dense_max_nodes": NON_NEGATIVE,
}


def ranged(default: Any, valid: Range) -> Any:
    """A schema field whose value must lie in ``valid`` (checked by ``check_ranges``): ranges are declared
    where the key is, in each algorithm's config."""
    return field(default=default, metadata={"range": valid})


def schema_ranges(node: Any, prefix: str) -> dict[str, Range]:
    """The ``ranged`` fields of a structured config node (an algorithm's schema), as dotted keys."""
    schema = OmegaConf.get_type(node) if OmegaConf.is_config(node) else None
    if not (isinstance(schema, type) and is_dataclass(schema)):
        return {}
    return {f"{prefix}.{f.name}": f.metadata["range"] for f in fields(schema) if "range" in f.metadata}


def check_ranges(cfg) -> None:
    """Every numeric key within its range (``RANGES``, and the algorithm schema's); raises ConfigError naming the
    first key that is not."""
    for key, valid in {**RANGES, **schema_ranges(OmegaConf.select(cfg, "algorithm"), "algorithm")}.items():
        value = OmegaConf.select(cfg, key)
        if value is None:  # an Optional key left unset (the schema decides where None is allowed)
            continue
        for item in value if isinstance(value, Sequence) and not isinstance(value, str) else [value]:
            if isinstance(item, bool) or not isinstance(item, (int, float)) or item not in valid:
                raise ConfigError(f"{key}={_shown(value)} {valid}")


def _shown(value: Any) -> str:
    return str(list(value)) if isinstance(value, Sequence) and not isinstance(value, str) else repr(value)


def validate(cfg) -> None:
    """Value checks the types cannot express; raises ConfigError naming the key. Runs before any work."""
    if cfg.eval.decoder == "guided":
        raise ConfigError(
            "eval.decoder='guided': the model-guided MILP is a row of its own in every test table "
            "(eval.keeps=[1,2] with eval.pruners=[model,...]: HiGHS on each UAV's most likely targets); "
            f"eval.decoder picks the model row's decoder: {', '.join(CHOICES['eval.decoder'])}"
        )
    for key, allowed in CHOICES.items():
        value = OmegaConf.select(cfg, key)
        if value not in allowed:
            raise ConfigError(f"{key}={value!r} is not one of {', '.join(allowed)}")
    for key, allowed in ITEM_CHOICES.items():
        wrong = [item for item in OmegaConf.select(cfg, key) or [] if item not in allowed]
        if wrong:
            raise ConfigError(f"{key}: {', '.join(map(repr, wrong))} is not one of {', '.join(allowed)}")
    check_ranges(cfg)
    if cfg.task.name == "file" and (OmegaConf.is_missing(cfg.task, "file") or not cfg.task.file):
        raise ConfigError("task=file needs task.file=PATH (a .json or .npz scene file)")
    if cfg.task.name == "folder" and (OmegaConf.is_missing(cfg.task, "folder") or not cfg.task.folder):
        raise ConfigError("task=folder needs task.folder=PATH (a folder of .json/.npz scene files)")
    if cfg.task.get("folder") and cfg.curriculum.name != "none":
        raise ConfigError(
            f"task=folder with curriculum={cfg.curriculum.name}: a curriculum draws scenes of its "
            "stages' sizes; your folder's scenes are one split: use curriculum=none"
        )
    if cfg.task.get("folder") and cfg.mode == "solve":
        raise ConfigError(
            "mode=solve with task=folder: it solves one scene (task=file task.file=PATH); a folder's "
            "test scenes are scored by mode=eval ckpt=... task=folder"
        )
    if cfg.env.goto_home and cfg.env.action != "goto":
        raise ConfigError(f"env.goto_home=true: the home action is a goto action; env.action is {cfg.env.action}")
    problem = system_path_problem(cfg.data.cache_dir)
    if problem:
        raise ConfigError(
            f"data.cache_dir={cfg.data.cache_dir}: {problem}: caches are written there; choose a directory of your own"
        )
    batch_size = cfg.hardware.batch_size
    if batch_size != "auto" and not (
        isinstance(batch_size, int) and not isinstance(batch_size, bool) and batch_size > 0
    ):
        raise ConfigError(f"hardware.batch_size={batch_size!r} must be a positive integer or 'auto'")
    layers = cfg.optim.checkpoint_layers
    if layers is not None and any(not 0 <= i < cfg.model.layers for i in layers):
        raise ConfigError(
            f"optim.checkpoint_layers={list(layers)} must index the model's "
            f"{cfg.model.layers} layers (0..{cfg.model.layers - 1})"
        )
    sizes = list(cfg.data.fresh_sizes)
    if sizes and (cfg.data.source != "generated" or cfg.curriculum.name != "none"):
        raise ConfigError(
            f"data.fresh_sizes={sizes}: scene sizes for data.source=generated without a curriculum "
            f"(here data.source={cfg.data.source}, curriculum={cfg.curriculum.name}): fresh scenes are "
            "drawn at any size, a cached split or a curriculum stage has one"
        )
    cur = cfg.curriculum
    if cur.name != "none":
        if list(cur.stages) != sorted(set(cur.stages)) or min(cur.stages) < 1 or cur.stages[-1] != cfg.data.n_uav:
            raise ConfigError(
                f"curriculum.stages={list(cur.stages)} must be increasing positive sizes ending at "
                f"data.n_uav={cfg.data.n_uav}"
            )
        if len(cur.replay) != len(cur.stages) or not all(0 <= r < 1 for r in cur.replay) or cur.replay[0] != 0:
            raise ConfigError(
                f"curriculum.replay={list(cur.replay)} needs one fraction in [0, 1) per stage "
                f"({len(cur.stages)}), the first 0 (no earlier stage)"
            )
    if "heads" in cfg.model and cfg.model.hidden % cfg.model.heads:
        raise ConfigError(f"model.hidden={cfg.model.hidden} must be divisible by model.heads={cfg.model.heads}")
    check_task(cfg)
    check_shifts(cfg)
    check_disruptions(cfg)


def check_task(cfg) -> None:
    """Each min of the scene generator's settings (``cfg.task``) at most its max."""
    for low, high in (
        ("task.need_min", "task.need_max"),
        ("task.range_min", "task.range_max"),
        ("task.value_min", "task.value_max"),
    ):
        if OmegaConf.select(cfg, low) > OmegaConf.select(cfg, high):
            raise ConfigError(f"{low}={OmegaConf.select(cfg, low)} exceeds {high}={OmegaConf.select(cfg, high)}")


def check_disruptions(cfg) -> None:
    """Every disrupted test set run (``eval.disruption_sets``) is defined in ``eval.disruptions`` and changes only
    disruption fields of the environment, to valid values."""
    missing = [name for name in cfg.eval.disruption_sets if name not in cfg.eval.disruptions]
    if missing:
        raise ConfigError(
            f"eval.disruption_sets: {', '.join(missing)} not defined in eval.disruptions (defined: "
            f"{', '.join(cfg.eval.disruptions)}); add one with +eval.disruptions.NAME={{failures:0.5}}"
        )
    for name in cfg.eval.disruption_sets:
        change = cfg.eval.disruptions[name]
        if name == "nominal":
            raise ConfigError("eval.disruption_sets: 'nominal' is the undisrupted test set, always run; name yours")
        unknown = sorted(set(change) - set(disruptions.SET_FIELDS))
        if unknown:
            raise ConfigError(
                f"eval.disruptions.{name}: {', '.join(unknown)} is not a disruption (one of "
                f"{', '.join(disruptions.SET_FIELDS)})"
            )
        for key, value in change.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value not in RANGES[f"env.{key}"]:
                raise ConfigError(f"eval.disruptions.{name}.{key}={_shown(value)} {RANGES[f'env.{key}']}")
            if isinstance(getattr(EnvSettings, key), int) and not isinstance(value, int):  # a count of steps
                raise ConfigError(f"eval.disruptions.{name}.{key}={_shown(value)} must be a whole number")


def check_shifts(cfg) -> None:
    """Every shifted test set run (``eval.shift_sets``) is defined in ``eval.shifts``, as task=uniform with known
    task fields set to valid values."""
    missing = [name for name in cfg.eval.shift_sets if name not in cfg.eval.shifts]
    if missing:
        raise ConfigError(
            f"eval.shift_sets: {', '.join(missing)} not defined in eval.shifts (defined: "
            f"{', '.join(cfg.eval.shifts)}); add one with +eval.shifts.NAME={{need_max:4}}"
        )
    known = [f.name for f in fields(SceneDistribution)]
    for name in cfg.eval.shift_sets:
        change = cfg.eval.shifts[name]
        unknown = sorted(set(change) - set(known))
        if unknown:
            raise ConfigError(
                f"eval.shifts.{name}: {', '.join(unknown)} is not a task field (one of {', '.join(known)})"
            )
        shifted = OmegaConf.create({"task": {**asdict(SceneDistribution()), **change}})
        try:
            if shifted.task.positions not in CHOICES["task.positions"]:
                raise ConfigError(
                    f"task.positions={shifted.task.positions!r} is not one of {', '.join(CHOICES['task.positions'])}"
                )
            check_ranges(shifted)  # the schema's task ranges
            check_task(shifted)
        except ConfigError as err:
            raise ConfigError(f"eval.shifts.{name}: {err}") from None
