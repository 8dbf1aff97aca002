"""Typed schemas of the config groups, registered in Hydra's ConfigStore (``register_configs``).

``conf/config.yaml`` lists ``uavgnn_schema`` first in its defaults, so every
YAML file is merged onto these dataclasses: an unknown key (``train.stpes``)
or a wrong type (``train.steps=abc``, ``optim.amp=maybe``) fails at
composition, naming the key, before any work starts. The ``model`` and
``algorithm`` groups take the schema of the option chosen: each model kind
(``uavgnn.models``) and each algorithm (``uavgnn.algorithms``) declares its
own, so ``algorithm=masac`` has MASAC's keys only. ``uavgnn.algorithms.checkpoint_config.default_config()``
is a complete config (the defaults of the YAML files) for use without Hydra.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from uavgnn.envs.disruptions import TEST_SETS
from uavgnn.envs.settings import EnvSettings
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.runs.directory import job_dir_name


@dataclass
class TaskConfig(SceneDistribution):
    name: str = "uniform"
    file: Optional[str] = None  # scene file (JSON/NPZ) used by task=file
    folder: Optional[str] = None  # folder of scene files used by task=folder (uavgnn/problem/scene_folder.py)


@dataclass
class EnvConfig(EnvSettings):
    val_episodes: int = 256  # fixed validation episodes (the same for every run), scored against the planner
    # on-policy training across swarm sizes: each collection flies one of these sizes (drawn from the seed and the
    # step), as many episodes as hold the UAVs of n_uav's collection; []: n_uav only. Validation stays at n_uav.
    train_sizes: list[int] = field(default_factory=list)


@dataclass
class DataConfig:
    source: str = "cache"  # cache: MILP-labelled cached splits | generated: new device-generated scenes every step
    n_uav: int = 16  # UAVs per training scene (the curriculum may change it per stage)
    # data.source=generated: each step's scenes have one of these sizes (drawn per step), as many as hold the nodes
    # of hardware.batch_size scenes of data.n_uav; [] = data.n_uav only
    fresh_sizes: list[int] = field(default_factory=list)
    train_scenes: int = 4000
    val_scenes: int = 256
    test_scenes: int = 256
    k_min: int = 8  # adaptive k = min(max(k_min, ceil(N / k_divisor)), k_max)
    k_divisor: int = 4
    k_max: int = 32  # candidates stored per UAV in the cache: the cap in large scenes (BENCHMARKS.md)
    k_jitter: int = 2  # +-jitter of k per training batch
    uav_neighbours: int = 8  # UAV<->UAV edges per UAV
    cache_dir: str = ".cache/uavgnn"  # relative paths are relative to the launch directory
    label_workers: int = 2  # processes solving MILP labels
    label_time_limit: float = 10.0  # seconds per scene for the label MILP
    train_seed: int = 1_000_000  # base seeds of the splits: disjoint by construction
    val_seed: int = 2_000_000
    test_seed: int = 3_000_000


@dataclass
class HardwareConfig:
    name: str = "cpu"
    device: str = "cpu"  # cpu | cuda | auto
    batch_size: Any = 64  # graphs per step (the global batch under torchrun), or "auto"
    max_batch_size: int = 4096  # cap of batch_size=auto
    memory_limit_mb: float = 0.0  # memory budget of batch_size=auto; 0 = the device's memory
    loader: str = "memory"  # memory (vectorised gather) | pyg (torch_geometric DataLoader)
    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int = 2
    persistent_workers: bool = False
    precision: str = "bf16"  # autocast dtype when optim.amp: bf16 | fp16
    memory_fraction: float = 0.9
    threads: int = 1  # torch intra-op threads per process; 0 = every core it may use (runtime.cpu_threads)
    data_on_device: str = "auto"  # keep training data (replay buffer, padded split) on the device: auto | true | false
    sweep_jobs: int = 2  # parallel jobs of a hydra/launcher=joblib sweep


@dataclass
class OptimConfig:
    amp: bool = False
    compile: bool = False
    grad_checkpoint: bool = False
    checkpoint_layers: Optional[list[int]] = None  # layers under grad_checkpoint; null = all
    graph_cache: bool = True
    prefetch: bool = True
    tf32: bool = True  # CUDA: TF32 tensor cores for fp32 matmuls (faster than bf16 autocast for this model)
    sync_free: bool = False  # fixed-shape variants of the step's data-dependent loops (REINFORCE's greedy baseline)
    dense_max_nodes: int = 0  # scenes of at most this many nodes attend by dense masked matmuls (0: PyG's sparse path)
    cuda_graphs: bool = False  # CUDA: replay each update (forward, backward, optimisers) as one captured CUDA graph


@dataclass
class TrainConfig:
    steps: int = 2000
    lr: float = 3e-3
    weight_decay: float = 1e-4
    schedule: str = "cosine"  # cosine | plateau
    plateau_patience: int = 3
    warmup_steps: int = 50
    grad_clip: float = 1.0
    ema_decay: float = 0.99  # evaluate and ship an exponential moving average of the weights; 0 = off
    eval_every: int = 250
    ckpt_every: int = 250
    log_every: int = 25
    decoder: str = "greedy"  # argmax | greedy
    max_bad_steps: int = 5  # consecutive non-finite losses before rolling back to the last good checkpoint
    max_rollbacks: int = 2  # rollbacks (LR / 10 each) before training stops as diverged


@dataclass
class CurriculumConfig:
    name: str = "none"  # none: every step on data.n_uav scenes
    stages: list[int] = field(default_factory=lambda: [4, 8, 12, 16])  # UAVs per stage; the last = data.n_uav
    advance_threshold: float = 0.8  # stage performance (1 - val optimality_gap) to count as a pass
    consecutive_evaluations: int = 5  # passes in a row to advance
    patience: int = 10  # evaluations in a stage after which it advances anyway
    performance_threshold: float = 0.6  # fall back below this x the previous stage's performance ...
    consecutive_failures: int = 3  # ... this many evaluations in a row
    max_fallbacks: int = 2
    learning_rate_decay: float = 0.5  # LR multiplier at each fallback
    replay: list[float] = field(default_factory=lambda: [0.0, 0.3, 0.4, 0.5])  # earlier stages' share per stage
    batch_policy: str = "nodes"  # nodes (node_budget per batch; measured faster) | by_scale | fixed
    node_budget: int = 1536  # batch_policy=nodes: nodes (UAVs + targets) per batch


@dataclass
class ProfileConfig:
    steps: int = 50  # measured training steps
    warmup: int = 5  # unmeasured steps first (allocator, caches, compilation)
    torch_profiler: bool = False  # also write a PyTorch profiler trace (TensorBoard) into the run directory


@dataclass
class BenchmarkConfig:
    sections: list[str] = field(default_factory=lambda: ["cache", "pipeline", "toggles", "scaling", "milp"])
    repeats: int = 3  # timings are medians of this many repeats
    cache_scenes: int = 1000  # scenes of the cold/warm cache comparison
    scenes: Optional[int] = None  # training scenes of the pipeline and toggle sections (None: data.train_scenes)
    pipeline_steps: int = 20  # training steps timed per pipeline and per toggle
    toggles: list[str] = field(
        default_factory=lambda: ["amp", "compile", "grad_checkpoint", "loader_pyg", "loader_pyg_workers"]
    )
    toggle_model: str = "medium"  # model of the amp / compile / loader toggles
    toggle_batch_size: int = 512
    checkpoint_model: str = "large"  # model of the grad_checkpoint toggle
    checkpoint_batch_size: int = 256
    scaling_nodes: list[int] = field(default_factory=lambda: [10_000, 30_000, 100_000, 300_000, 1_000_000])
    milp_uavs: list[int] = field(default_factory=lambda: [1024, 4096, 16384])
    milp_time_limit: float = 150.0
    expected_minutes: float = 25.0  # this preset's duration on a 2-core laptop CPU, said before it starts


@dataclass
class CompareConfig:
    metrics: list[str] = field(default_factory=list)  # final metrics to show, as recorded; []: all the runs declare
    seed_means: bool = True  # console, markdown, LaTeX: each seed group's mean only; false: its runs too
    interval: str = "auto"  # auto | t | bootstrap: the 95% interval of a mean from 3 seeds (uavgnn/modes/compare.py)


@dataclass
class LoggerConfig:
    name: str = "wandb"  # wandb | tensorboard | jsonl | none (jsonl is always written)
    mode: str = "offline"  # wandb: offline | online | disabled
    project: str = "uavgnn"
    entity: Optional[str] = None
    init_timeout: float = 20.0  # wandb online: seconds to wait for the server before logging offline instead


SHIFTS = {  # the shifted test sets of mode=eval (conf/eval/default.yaml documents them)
    "clustered_2": {"positions": "clustered", "cluster_size": 2},
    "clustered_4": {"positions": "clustered", "cluster_size": 4},
    "clustered_12": {"positions": "clustered", "cluster_size": 12},
    "ranges_wide": {"range_min": 1.0, "range_max": 8.0},
    "needs_5": {"need_max": 5},
    "targets_few": {"target_ratio": 0.25},
    "targets_many": {"target_ratio": 1.0},
    "density_low": {"density": 0.5},
    "density_high": {"density": 2.0},
}


@dataclass
class EvalConfig:
    scales: list[int] = field(default_factory=lambda: [16])  # UAVs per test scene; the training size is added
    positions: list[str] = field(default_factory=lambda: ["uniform", "clustered"])  # test distributions
    max_total_uavs: int = 8192  # test scenes per scale = min(data.test_scenes, max_total_uavs // scale), >= 1
    decoder: str = "greedy"  # argmax | greedy | sample (best of eval.samples by the true reward)
    samples: int = 16  # decoder=sample: assignments tried per scene (the first is the greedy decode)
    repair: bool = False  # fill nearly-complete partial targets with idle UAVs in range, drop the rest
    keeps: list[int] = field(default_factory=lambda: [1, 2])  # pruned MILPs: each UAV's candidates kept, a row each
    pruners: list[str] = field(default_factory=lambda: ["model", "nearest", "value", "relaxation"])  # ... ranked by
    milp_budgets: list[float] = field(default_factory=lambda: [0.1, 1.0, 10.0])  # the full MILP stopped there: rows
    best_of: int = 16  # mode=eval: a "sampled (best of 16)" row, the sample decoder's (0: no row)
    milp_time_limit: float = 60.0  # reference MILP per test scene; its status is reported
    capacity_iters: Optional[int] = None  # mode=eval: the model's balancing rounds (None: the checkpoint's own; 0: off)
    capacity_fill: Optional[float] = None  # mode=eval: the model's fill share (None: the checkpoint's own; 1: no fill)
    commit_stages: Optional[int] = None  # mode=eval: the model's decision stages (None: the checkpoint's own; 0: one)
    k_max: Optional[int] = None  # mode=eval: candidate targets per UAV at most (None: the checkpoint's own)
    episodes: int = 256  # an environment policy's checkpoint: fixed test episodes
    # shifted test sets at the training size: name -> task fields changed from task=uniform's defaults
    shifts: dict[str, dict[str, Any]] = field(default_factory=lambda: {k: dict(v) for k, v in SHIFTS.items()})
    shift_sets: list[str] = field(default_factory=lambda: list(SHIFTS))  # the eval.shifts sets to run ([]: none)
    # an environment policy's disrupted test sets, beside the nominal one at every size: name -> env fields changed
    disruptions: dict[str, dict[str, Any]] = field(default_factory=lambda: {k: dict(v) for k, v in TEST_SETS.items()})
    disruption_sets: list[str] = field(default_factory=lambda: list(TEST_SETS))  # the ones to run ([]: none)


@dataclass
class SolveConfig:
    n_uav: int = 16  # size of the generated scene when task.file is unset
    time_limit: float = 60.0  # MILP time limit, seconds
    gap_reference: bool = True  # also run the MILP to report optimality_gap
    keep: int = 2  # solver=guided|pruned: each UAV's best targets (by the model, or solve.pruner) the MILP keeps
    pruner: str = "nearest"  # solver=pruned: nearest | value | relaxation (solvers.pruned)


@dataclass
class Config:
    mode: str = "train"  # train | eval | solve | cache | compare | profile | benchmark | info | rollouts
    seed: int = 0
    solver: str = "milp"  # mode=solve: milp | greedy | lap | mcf | model | guided | pruned
    action: str = "info"  # mode=cache: info | verify | clear
    force: bool = False  # mode=cache action=clear: delete without asking
    ckpt: Optional[str] = None
    resume: str = "false"  # false | true | auto: continue from the run directory's last.pt
    path: Any = None  # mode=compare: a sweep directory or a list of run directories
    task: TaskConfig = field(default_factory=TaskConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: Any = None  # the schema of the chosen model kind (uavgnn/models: transformer_gnn, mlp, tcn)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    algorithm: Any = None  # the schema of the chosen algorithm (uavgnn/algorithms/<name>.py)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    solve: SolveConfig = field(default_factory=SolveConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)
    compare: CompareConfig = field(default_factory=CompareConfig)


GROUP_SCHEMAS: list[Callable[[ConfigStore], None]] = []  # the layers above add the schemas of their groups


def register_configs() -> None:
    """Attach the schemas to Hydra (before ``@hydra.main`` or ``compose``): the root as ``uavgnn_schema``, then
    those of the ``algorithm`` and ``model`` groups, which the algorithm registry adds to ``GROUP_SCHEMAS`` when
    it is imported (each algorithm's as ``algorithm/schema/<name>``, each model kind's as ``model/schema/<kind>``)."""
    store = ConfigStore.instance()
    store.store(name="uavgnn_schema", node=Config)
    for store_group_schemas in GROUP_SCHEMAS:
        store_group_schemas(store)


# hydra.sweep.subdir names a job's folder by its overrides; registered on import, as sweep workers import this
# module before their job's directory is resolved
OmegaConf.register_new_resolver("uavgnn.job_dir", job_dir_name, replace=True)


# conf/hydra/launcher/joblib.yaml takes the plugin's n_jobs from the hardware preset and is meant to be
# validated against the plugin's schema of the same name; Hydra 1.3 does that but warns on every compose
# (sweep workers included, hence module level: they import this module, not run.py).
warnings.filterwarnings("ignore", message=r"\s*'hydra/launcher/joblib' is validated against ConfigStore schema")
