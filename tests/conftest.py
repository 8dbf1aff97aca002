"""Shared fixtures and helpers: every cache, output and wandb directory goes into tmp_path; the one way a test
composes a config (``compose``), the small runs several test folders train, and the drills' tools (a program in
the background, a private mount namespace, a snapshot of a directory, a hostile checkpoint)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from omegaconf import DictConfig, OmegaConf, open_dict
from scipy.optimize import linprog

from uavgnn.data.store import GraphStore
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.graphs import build_graph
from uavgnn.problem.scenes import FeasiblePairs, Scene, SceneDistribution, feasible_pairs, rank_in_runs
from uavgnn.solvers import solve_milp

ROOT = Path(__file__).resolve().parents[1]
if os.environ.get("PYTEST_XDIST_WORKER"):
    # pytest -n 2 (the default): one worker per core, so one thread each, for the tests and the programs they
    # start; two threads per worker would spin against the other worker (steps ~50x slower when a core is busy)
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        (tmp_path / var.lower()).mkdir()
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "torchinductor"))  # torch.compile's cache
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    yield tmp_path
    for pid in children(os.getpid()):  # a test that failed mid-way leaves no training run behind
        try:
            os.killpg(pid, signal.SIGKILL) if os.getpgid(pid) == pid else os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def children(pid: int) -> list[int]:
    """The programs (``run.py``, torchrun) ``pid`` started that still run (Linux ``/proc``): none once a test
    has ended, unless it failed before stopping them."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid and (str(ROOT / "run.py") in command or "torch.distributed.run" in command):
            found.append(int(entry.name))
    return found


@pytest.fixture
def hand_scene() -> Scene:
    """Four UAVs, two targets; distances worked by hand in the tests (3-4-5 triangles).

    UAV 0 (0,0) r5, UAV 1 (3,0) r5, UAV 2 (0,4) r5, UAV 3 (10,10) r1;
    target 0 (0,0) need 1 value 2, target 1 (3,4) need 2 value 5; lam 0.5.
    """
    return Scene(
        uav_pos=np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0], [10.0, 10.0]]),
        uav_range=np.array([5.0, 5.0, 5.0, 1.0]),
        target_pos=np.array([[0.0, 0.0], [3.0, 4.0]]),
        need=np.array([1, 2]),
        value=np.array([2.0, 5.0]),
        lam=0.5,
    )


class WarmProgram:
    """This worker's ``tests/warm_program.py``: started once, in the background, with the environment the tests
    start from; it forks a child per run, each as a fresh ``python run.py`` after the imports."""

    process: subprocess.Popen[str] | None = None
    # read as an interpreter starts (the plug-ins found on the path, OpenMP's threads): a run whose value differs
    # from the warm program's gets a fresh interpreter
    STARTUP = ("PYTHONPATH", "PYTHONHASHSEED", "PYTHONWARNINGS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    started: dict[str, str | None] = {}
    lock = threading.Lock()  # one run at a time through its pipe

    @classmethod
    def fits(cls) -> bool:
        """Whether a run now would start as the warm program did."""
        return all(os.environ.get(name) == cls.started.get(name) for name in cls.STARTUP)

    @classmethod
    def run(cls, argv: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
        with cls.lock, tempfile.TemporaryDirectory() as folder:
            if cls.process is None or cls.process.poll() is not None:
                cls.start()
            out, err = Path(folder, "stdout"), Path(folder, "stderr")
            request = {"argv": argv, "cwd": str(cwd), "env": dict(os.environ), "timeout": timeout}
            cls.process.stdin.write(json.dumps({**request, "stdout": str(out), "stderr": str(err)}) + "\n")
            cls.process.stdin.flush()
            answer = json.loads(cls.process.stdout.readline())
            args = [sys.executable, str(ROOT / "run.py"), *argv]
            if answer["timed_out"]:
                raise subprocess.TimeoutExpired(args, timeout, out.read_text(), err.read_text())
            return subprocess.CompletedProcess(args, answer["returncode"], out.read_text(), err.read_text())

    @classmethod
    def start(cls) -> None:
        cls.started = {name: os.environ.get(name) for name in cls.STARTUP}
        script = ROOT / "tests" / "warm_program.py"
        cls.process = subprocess.Popen(
            [sys.executable, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )


if os.environ.get("PYTEST_XDIST_WORKER"):
    WarmProgram.start()  # its imports overlap this worker's first tests


def run_cli(*overrides: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``python run.py`` for real (Hydra and all) in ``cwd``: forked from this worker's warm program, or in a
    new interpreter where the environment that an interpreter reads as it starts differs from the warm one's."""
    if WarmProgram.started and not WarmProgram.fits():
        argv = [sys.executable, str(ROOT / "run.py"), *overrides]
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
    else:
        proc = WarmProgram.run(list(overrides), cwd, 600)
    if check and proc.returncode != 0:
        raise AssertionError(f"run.py {' '.join(overrides)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def job_dirs(sweep: Path) -> list[Path]:
    """A sweep's job folders (``3-model=tiny,seed=1``), in job order."""
    return sorted(
        (p for p in sweep.iterdir() if p.is_dir() and p.name.split("-")[0].isdigit()),
        key=lambda p: int(p.name.split("-")[0]),
    )


@pytest.fixture(scope="session")
def labelled_store() -> GraphStore:
    """32 small scenes (uniform and clustered) with their MILP labels, graphs built at k_max = 16."""
    scenes = generate_scenes(SceneDistribution(), 12, 24, seed=3) + generate_scenes(
        SceneDistribution(positions="clustered"), 12, 8, seed=4
    )
    labels = [solve_milp(s) for s in scenes]
    return GraphStore.from_graphs([build_graph(s, 16, 6, r.assignment) for s, r in zip(scenes, labels)], scenes, labels)


def straight_and_resumed(compose_steps, tmp_path: Path, half: int = 10) -> tuple[dict, dict]:
    """``last.pt`` of a run of 2 x ``half`` steps and of one stopped at ``half`` then resumed to 2 x ``half``.
    ``compose_steps(steps)`` gives the config; its schedule must not depend on ``train.steps`` (plateau)."""
    import torch

    from uavgnn.loggers import MetricLogger
    from uavgnn.training.trainer import train

    def run(name: str, steps: int, resume: bool = False) -> Path:
        cfg = compose_steps(steps)
        out = tmp_path / name
        out.mkdir(exist_ok=True)
        logger = MetricLogger(out, cfg.logger, config={}, resume_step=half if resume else None)
        try:
            train(cfg, out, logger, resume_from=out / "last.pt" if resume else None)
        finally:
            logger.finish()
        return out

    straight = run("straight", 2 * half)
    run("resumed", half)
    resumed = run("resumed", 2 * half, resume=True)
    return tuple(torch.load(d / "last.pt", weights_only=True) for d in (straight, resumed))


def resume_is_exact(compose, tmp_path: Path, half: int) -> tuple[dict, dict]:
    """``straight_and_resumed`` of ``compose(*overrides)`` on the plateau schedule, the two runs' weights checked
    equal to the bit; the two ``last.pt`` for further checks."""
    import torch

    a, b = straight_and_resumed(lambda steps: compose(f"train.steps={steps}", "train.schedule=plateau"), tmp_path, half)
    for name, value in a["model"].items():
        torch.testing.assert_close(b["model"][name], value, rtol=0, atol=0)
    return a, b


# ---------------------------------------------------------------- composing a config


def compose(*overrides: str) -> DictConfig:
    """The config ``run.py <overrides>`` runs with: every schema registered, composed from the packaged configs
    (``uavgnn.program.from_python.compose_config``); an override that does not compose is a ``ConfigError`` with
    the command line's one line. The one way a test composes a config (but the tests of that machinery)."""
    from uavgnn.program.from_python import compose_config

    return compose_config(overrides)


def shrink(cfg: DictConfig, cache_dir: Path) -> DictConfig:
    """A composed config shrunk to a few steps on 6-UAV scenes, its cache in ``cache_dir``."""
    with open_dict(cfg):
        cfg.data.update(
            n_uav=6, train_scenes=32, val_scenes=8, test_scenes=8, cache_dir=str(cache_dir), label_workers=1
        )
        cfg.train.update(steps=4, eval_every=2, ckpt_every=2, log_every=2, warmup_steps=1)
        cfg.hardware.batch_size = 8
        cfg.env.update(n_envs=8, val_episodes=16)
        smaller = {
            "learning_starts": 16,
            "train_envs": 4,
            "eval_envs": 2,
            "rollout_steps": 48,
            "filter_tuning_steps": 5,
        }
        cfg.algorithm.update({key: value for key, value in smaller.items() if key in cfg.algorithm})
        if cfg.algorithm.get("imitation_steps"):  # the main job's imitation phase, then REINFORCE
            cfg.algorithm.imitation_steps = 2
        if cfg.curriculum.name != "none":
            cfg.curriculum.update(stages=[3, 6], replay=[0.0, 0.3], patience=1)
        if cfg.hardware.device == "cuda" and not torch.cuda.is_available():
            cfg.hardware.device = "auto"
    return cfg


def six_uav_cfg(tmp_path: Path, *overrides: str) -> DictConfig:
    """A few steps on 6-UAV scenes with every directory in ``tmp_path``: a row, a validation and a checkpoint
    every 3 steps; checked as the program checks it."""
    from uavgnn.algorithms.registry import check_config

    cfg = compose("experiment=debug", "model=tiny", "logger=jsonl", *overrides)
    with open_dict(cfg):
        cfg.data.update(
            n_uav=6, train_scenes=32, val_scenes=8, test_scenes=8, cache_dir=str(tmp_path / "cache"), label_workers=1
        )
        cfg.train.update(eval_every=3, ckpt_every=3, log_every=3)
        cfg.hardware.batch_size = 8
    check_config(cfg)
    return cfg


def train_in_process(cfg: DictConfig, out: Path) -> dict:
    """``cfg`` trained in this process into ``out`` (a new directory); its ``last.pt``."""
    from uavgnn.loggers import MetricLogger
    from uavgnn.training.trainer import train

    out.mkdir(parents=True)
    logger = MetricLogger(out, cfg.logger, config={})
    try:
        train(cfg, out, logger)
    finally:
        logger.finish()
    return torch.load(out / "last.pt", weights_only=True)


def tiny_cfg(tmp_path: Path, *overrides: str) -> DictConfig:
    """30 imitation steps on 6-UAV scenes: a row every 5 steps, a checkpoint every 5, a validation every 10."""
    cfg = compose("experiment=debug", "model=tiny", "logger=jsonl", *overrides)
    with open_dict(cfg):
        cfg.data.update(
            n_uav=6, train_scenes=32, val_scenes=8, test_scenes=8, cache_dir=str(tmp_path / "cache"), label_workers=1
        )
        cfg.train.update(steps=30, eval_every=10, ckpt_every=5, log_every=5, warmup_steps=1)
        cfg.hardware.batch_size = 8
    return cfg


MASAC_SMALL = [  # 6 MASAC updates of an MLP on 4 environments: a row and a checkpoint every 3, a validation at the end
    "experiment=debug",
    "algorithm=masac",
    "model=mlp",
    "logger=jsonl",
    "env.n_envs=4",
    "algorithm.learning_starts=8",
    "algorithm.buffer_size=64",
    "model.hidden=16",
    "algorithm.critic_hidden=16",
    "hardware.batch_size=8",
    "env.val_episodes=4",
    "train.steps=6",
    "train.eval_every=6",
    "train.ckpt_every=3",
    "train.log_every=3",
    "train.warmup_steps=0",
    "train.schedule=plateau",
]


def masac_cfg(tmp_path: Path, *overrides: str) -> DictConfig:
    """``MASAC_SMALL`` composed, its cache in ``tmp_path``, with ``overrides``."""
    return compose(*MASAC_SMALL, f"data.cache_dir={tmp_path / 'cache'}", *overrides)


def compose_masac(tmp_path: Path, *overrides: str) -> DictConfig:
    """MASAC on 8 environments with small networks: a row every 5 updates, a validation and a checkpoint every 10."""
    return compose(
        "algorithm=masac",
        "logger=jsonl",
        "env.n_envs=8",
        "env.val_episodes=8",
        "algorithm.learning_starts=16",
        "algorithm.buffer_size=512",
        "model.hidden=16",
        "algorithm.critic_hidden=16",
        "hardware.batch_size=32",
        "train.log_every=5",
        "train.eval_every=10",
        "train.ckpt_every=10",
        *overrides,
    )


# a small MASAC run of the real program: 20 updates, a validation and a checkpoint every 10
MASAC = [
    "algorithm=masac",
    "env.n_envs=8",
    "env.val_episodes=8",
    "algorithm.learning_starts=16",
    "algorithm.buffer_size=512",
    "model.hidden=16",
    "algorithm.critic_hidden=16",
    "hardware.batch_size=32",
    "train.steps=20",
    "train.eval_every=10",
    "train.ckpt_every=10",
    "logger=jsonl",
]

SMALLEST = {  # each algorithm at its smallest (the benchmark's configurations, shrunk)
    "imitation": [
        "experiment=debug",
        "model=tiny",
        "data.n_uav=6",
        "data.train_scenes=32",
        "data.val_scenes=8",
        "data.test_scenes=8",
        "hardware.batch_size=8",
    ],
    "imitation_padded": [
        "experiment=debug",
        "model=tiny",
        "data.n_uav=6",
        "data.train_scenes=32",
        "data.val_scenes=8",
        "data.test_scenes=8",
        "hardware.batch_size=8",
        "optim.dense_max_nodes=64",
    ],  # PaddedSplit
    "masac": [
        "experiment=debug",
        "algorithm=masac",
        "model=mlp",
        "model.hidden=16",
        "env.n_envs=4",
        "algorithm.learning_starts=8",
        "algorithm.buffer_size=64",
        "algorithm.critic_hidden=16",
        "hardware.batch_size=8",
        "env.val_episodes=4",
    ],
    "reinforce": [
        "experiment=debug",
        "algorithm=reinforce",
        "model=tiny",
        "data.n_uav=6",
        "data.train_scenes=32",
        "data.val_scenes=8",
        "data.test_scenes=8",
        "hardware.batch_size=8",
        "algorithm.samples=3",
        "optim.sync_free=true",
    ],
    "reinforce_default": [
        "experiment=debug",
        "algorithm=reinforce",
        "model=tiny",
        "data.n_uav=6",
        "data.val_scenes=8",
        "data.source=generated",
        "hardware.batch_size=8",
        "algorithm.samples=3",
    ],  # as shipped
    "reinforce_fresh": [
        "experiment=debug",
        "algorithm=reinforce",
        "model=tiny",
        "data.n_uav=6",
        "data.val_scenes=8",
        "data.source=generated",
        "hardware.batch_size=8",
        "algorithm.samples=3",
        "optim.sync_free=true",
        "optim.dense_max_nodes=64",
    ],  # padded fresh scenes, dense attention: fixed shapes
    "coma": ["experiment=coma", "env.val_episodes=4", "hardware.batch_size=4", "algorithm.minibatches=2"],
    "mappo": [
        "experiment=debug",
        "algorithm=mappo",
        "env.val_episodes=4",
        "hardware.batch_size=4",
        "algorithm.minibatches=2",
    ],
    "mappo_swarm": [
        "experiment=swarm",
        "env.n_uav=6",
        "env.n_envs=4",
        "env.val_episodes=4",
        "hardware.batch_size=4",
        "algorithm.minibatches=2",
        "algorithm.critic=graph",
        "algorithm.critic_hidden=16",
        "algorithm.critic_layers=1",
        "env.failures=0.5",
        "env.comm_drop=0.3",
        "env.target_speed=0.05",
        "env.obs_links=true",
        "model.layers=2",
    ],  # the graph actor (both kinds of its dense layers) and critic, the planner teaching, every disruption on
    "dynamics": ["experiment=debug", "algorithm=dynamics"],
}


def compose_small(tmp_path: Path, algorithm: str, *extra: str) -> DictConfig:
    """``SMALLEST[algorithm]`` without a dashboard, its cache in ``tmp_path``."""
    cfg = compose(*SMALLEST[algorithm], "logger=none", *extra)
    with open_dict(cfg):
        cfg.data.cache_dir = str(tmp_path / "cache")
    return cfg


# ---------------------------------------------------------------- references written out separately


def dense_balancing(prob: np.ndarray, need: np.ndarray, iters: int, fill: float = 1.0) -> np.ndarray:
    """The capacity balancing (``uavgnn.models.choices.capacity_balanced``) on a dense (UAVs, targets + idle)
    probability matrix."""
    from uavgnn.models.choices import TARGET_FLOOR

    p = prob.copy()
    for _ in range(iters):
        mass = p[:, :-1].sum(0) + np.exp(TARGET_FLOOR)
        p[:, :-1] *= np.where(mass > fill * need, need / mass, 1.0)
        p /= p.sum(1, keepdims=True)
    return p


# ---------------------------------------------------------------- the drills: the program as a user runs it

SMALL_RUN = [  # the real program's small imitation run: 6 UAVs, 64 training scenes, a row every 5 steps
    "experiment=debug",
    "model=tiny",
    "data.n_uav=6",
    "data.train_scenes=64",
    "data.val_scenes=8",
    "data.test_scenes=8",
    "hardware.batch_size=8",
    "train.log_every=5",
    "train.warmup_steps=2",
]
SMALL = [*SMALL_RUN, "logger=jsonl"]  # ... logged to jsonl


def small(tmp_path: Path, run: Path | str, *extra: str) -> list[str]:
    """``SMALL`` into run directory ``run``, its cache in ``tmp_path``, with ``extra``."""
    return [*SMALL, f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={run}", *extra]


def start(*overrides: str, cwd: Path) -> subprocess.Popen:
    """``run.py`` in the background, its output in files (a pipe nobody reads could block it)."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / "run.py"), *overrides],
        cwd=cwd,
        stdout=(cwd / "bg.out").open("w"),
        stderr=(cwd / "bg.err").open("w"),
    )


def wait_for(condition: Callable[[], object], what: str, timeout: float = 240.0) -> None:
    """Poll ``condition`` until it holds; a hang guard fails the test after ``timeout`` seconds."""
    deadline = time.time() + timeout
    while not condition():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def logged(run_dir: Path, key: str = "train/loss") -> list[int]:
    """The steps of the history's rows that hold ``key``."""
    from uavgnn.runs.history import read_history

    return [r["step"] for r in read_history(run_dir) if key in r]


def refusal(tmp_path: Path, *overrides: str) -> tuple[str, subprocess.CompletedProcess[str]]:
    """``run.py <overrides>`` (its cache and run directory in ``tmp_path``) refused: exit 2, one error line, no run
    directory left. Returns the line and the process."""
    run = tmp_path / "run"
    proc = run_cli(
        *overrides, f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={run}", cwd=tmp_path, check=False
    )
    line = one_error_line(proc, "error:")
    assert proc.returncode == 2 and not run.exists(), line
    return line, proc


def one_error_line(proc: subprocess.CompletedProcess, text: str) -> str:
    """The error is printed once, on one line, with no traceback; returns that line."""
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, output[-3000:]
    lines = [line for line in output.splitlines() if text in line]
    assert len(lines) == 1, output[-3000:]
    return lines[0]


def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state) from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            table[int(entry.name)] = (int(fields[1]), fields[0])
    return table


def living(pids: list[int]) -> list[int]:
    """Those of ``pids`` that still run (zombies are dead)."""
    table = process_table()
    return [pid for pid in pids if pid in table and table[pid][1] != "Z"]


def namespace(script: str) -> subprocess.CompletedProcess[str]:
    """Run a shell script in a private user + mount namespace (no root needed where the kernel allows
    unprivileged user namespaces): its tmpfs and read-only mounts vanish with it."""
    proc = subprocess.run(
        ["unshare", "--map-root-user", "--mount", "sh", "-c", script], capture_output=True, text=True, timeout=600
    )
    assert not proc.stderr.startswith("unshare:"), f"private mounts are not possible here: {proc.stderr.strip()}"
    return proc


def cli(*overrides: str) -> str:
    """The shell command of ``python run.py <overrides>``."""
    return " ".join([sys.executable, str(ROOT / "run.py"), *overrides])


def read_only(directory: Path) -> str:
    """The shell commands that mount ``directory`` read-only over itself (in a ``namespace``)."""
    return f"mount --bind {directory} {directory} && mount -o remount,ro,bind {directory} {directory}"


def snapshot(directory: Path) -> dict[str, str]:
    """Every entry below ``directory`` with a digest of its content (a symlink by its target, never followed):
    what a refused or destructive command must leave exactly as it was."""
    found = {}
    for path in sorted(directory.rglob("*")):
        key = str(path.relative_to(directory))
        if path.is_symlink():
            found[key] = f"-> {path.readlink()}"
        elif path.is_file():
            found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[key] = "dir"
    return found


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> Path:
    """A finished training run (10 steps, last.pt at 5 and 10) and its cache; tests copy it before touching it."""
    base = tmp_path_factory.mktemp("finished")
    run_cli(*small(base, base / "run", "train.steps=10", "train.ckpt_every=5", "train.eval_every=5"), cwd=base)
    return base


def copy_run(finished_run: Path, tmp_path: Path) -> Path:
    """A copy of ``finished_run``'s run (and its cache) in ``tmp_path``: the run directory."""
    shutil.copytree(finished_run / "run", tmp_path / "run", symlinks=True)
    shutil.copytree(finished_run / "cache", tmp_path / "cache", symlinks=True)
    return tmp_path / "run"


class Payload:
    """Unpickling this creates ``marker``: the side effect a hostile checkpoint would have."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture
def hostile(tmp_path) -> tuple[Path, Path]:
    """A checkpoint whose unpickling would run code, and the file that code would create."""
    marker = tmp_path / "PWNED"
    path = tmp_path / "hostile.pt"
    torch.save({"policy": {"w": Payload(marker)}, "config": "model: {}", "state": {"step": 1}}, path)
    return path, marker


def nearest(scene: Scene, k: int) -> FeasiblePairs:
    """Each UAV's ``k`` nearest feasible targets: the candidates a graph gives it."""
    pairs = feasible_pairs(scene)
    near = rank_in_runs(pairs.uav) < k
    return FeasiblePairs(pairs.uav[near], pairs.target[near], pairs.dist[near])


def whole_lp(scene: Scene) -> float:
    """The MILP of ``uavgnn.solvers.milp`` over every feasible pair, x and y in [0, 1], by HiGHS's interior point."""
    pairs = feasible_pairs(scene)
    p, n, m = len(pairs.uav), scene.n_uav, scene.n_target
    column = np.arange(p)
    uav_rows = sp.csr_matrix((np.ones(p), (pairs.uav, column)), shape=(n, p + m))
    target_rows = sp.csr_matrix(
        (
            np.concatenate([np.ones(p), -scene.need.astype(float)]),
            (np.concatenate([pairs.target, np.arange(m)]), np.concatenate([column, p + np.arange(m)])),
        ),
        shape=(m, p + m),
    )
    cost = np.concatenate([scene.lam * pairs.dist, -scene.value])
    res = linprog(cost, uav_rows, np.ones(n), target_rows, np.zeros(m), bounds=(0, 1), method="highs-ipm")
    assert res.status == 0
    return -res.fun


def make_run(
    root: Path,
    name: str,
    model: str,
    hidden: int,
    seed: int,
    gap: float | None,
    speed: float = 100.0,
    overrides: list[str] | None = None,
    **more: Any,
) -> Path:
    """A finished (or, ``gap`` None, failed) run's directory as the program leaves it; ``overrides``: its command
    line's (``.hydra/overrides.yaml``); ``more``: other config keys."""
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    OmegaConf.save(
        OmegaConf.create(
            {
                "seed": seed,
                "model": {"name": model, "hidden": hidden, "layers": 2},
                "data": {"cache_dir": f"/tmp/{name}"},
                "train": {"steps": 10},
                **more,
            }
        ),
        run / ".hydra" / "config.yaml",
    )
    if overrides is not None:
        OmegaConf.save(OmegaConf.create(overrides), run / ".hydra" / "overrides.yaml")
    history = [
        {"step": 5, "perf/graphs_per_s": speed, "perf/peak_mem_mb": 10.0},
        {"step": 10, "perf/graphs_per_s": speed + 20, "perf/peak_mem_mb": 12.0, "val/optimality_gap": 0.5},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))
    if gap is None:
        (run / "failed.json").write_text(json.dumps({"error": "ConfigError: model.hidden=-1 must be > 0"}))
    else:
        (run / "summary.json").write_text(
            json.dumps(
                {
                    "best_val_optimality_gap": gap,
                    "test/optimality_gap": gap + 0.01,
                    "test/reward": 10 - gap,
                    "test/completion_score": 0.9,
                }
            )
        )
    return run
