"""Shared fixtures: every cache, output and wandb directory goes into tmp_path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from uavgnn.data.store import GraphStore
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.graphs import build_graph
from uavgnn.problem.scenes import Scene, SceneDistribution
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
        script = Path(__file__).parent / "warm_program.py"
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
