"""One memory estimate before every large allocation, against the limit the process really has.

Without it ``mode=solve solver=model`` on a 2,000,000-UAV scene grew to 17 GB; estimates that read physical RAM
and ignore ``ulimit -v`` let a 9e7-pair scene under an 8 GB limit die in a numpy traceback; and
``hardware.batch_size=10**9`` with generated scenes allocated 64 GB, ended in a traceback and left a run
directory. Each is refused first, in one line naming the size and the knob, leaving nothing behind; so are a
scene of 2e9 feasible pairs, a JSON scene file too large to parse, and environments or a replay buffer that
cannot fit.
"""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT, compose, copy_run, one_error_line, refusal, run_cli
from scipy.spatial import cKDTree

from uavgnn.algorithms.registry import algorithm_class, check_config, network_parameters
from uavgnn.envs.replay import ReplayBuffer
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.infrastructure.errors import ConfigError, MemoryBudgetError, SceneFileError
from uavgnn.problem import scenes
from uavgnn.problem.scene_io import load_scene
from uavgnn.problem.scenes import Scene, SceneDistribution, feasible_pairs
from uavgnn.runs.history import read_history, thinned_history
from uavgnn.runs.record import MAX_HISTORY_ROWS

GB = 2**30


def limited(limit_bytes: int):
    """A ``preexec_fn`` that gives the child an address-space limit (``ulimit -v``)."""
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, resource.getrlimit(resource.RLIMIT_AS)[1]))


def run_limited(limit_bytes: int, *overrides: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "run.py"), *overrides],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=limited(limit_bytes),
    )


def test_the_address_space_limit_caps_what_is_available() -> None:
    """Under ``ulimit -v`` the available memory is the limit less what the process maps already, however much
    RAM the machine has free, and an estimate above it is refused naming ``ulimit -v``."""
    code = (
        "from uavgnn.infrastructure.memory import host_available_bytes, check_fits; from pathlib import Path\n"
        "size = int(next(l for l in Path('/proc/self/status').read_text().splitlines() "
        "if l.startswith('VmSize:')).split()[1]) * 1024\n"
        "print(host_available_bytes(), size)\n"
        "check_fits('a test allocation', 2.8 * 2**30, 'a smaller one')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, preexec_fn=limited(3 * GB), cwd=ROOT
    )
    available, mapped = map(int, proc.stdout.split())
    assert 0 < available <= 3 * GB - mapped + 2**20  # the child's VmSize grew a little between the two reads
    assert "MemoryBudgetError: a test allocation would need about 2.8 GB of memory" in proc.stderr
    assert "ulimit -v" in proc.stderr and "a smaller one" in proc.stderr


@pytest.mark.slow
def test_the_model_on_a_scene_too_large_for_the_limit_is_refused_before_scoring(tmp_path) -> None:
    """``mode=solve solver=model`` estimates the scoring before building the graph (benchmarks/bench_memory.py
    measures it): 1,500,000 UAVs, scored in tiles, under a 4 GB limit is one line."""
    run = tmp_path / "run"
    proc = run_limited(
        4 * GB,
        "mode=solve",
        "solver=model",
        "ckpt=pretrained",
        "solve.n_uav=1500000",
        "solve.gap_reference=false",
        "logger=none",
        "hardware.threads=1",
        f"hydra.run.dir={run}",
        cwd=tmp_path,
    )
    line = one_error_line(proc, "error:")
    # 32 candidates a UAV, 48 bytes each; a tile of 65,536 UAVs with its halo (3x) 5 bytes per pair and hidden unit
    # (hidden 64); 256 MB
    need = (1_500_000 * 32 * 48 + 3 * 65_536 * 32 * 5 * 64 + 2**28) / GB
    assert f"scoring a scene of 1,500,000 UAVs with the model would need about {need:.1f} GB" in line, line
    assert "ulimit -v" in line and "solver=mcf" in line
    assert not run.exists()


@pytest.mark.slow
def test_a_generated_batch_too_large_is_refused_before_it_is_drawn(tmp_path) -> None:
    """``hardware.batch_size=10**9`` with ``data.source=generated``: two trial steps price one more scene and
    the batch is refused in one line naming the knob; the run directory is not left behind."""
    run = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "run.py"),
            "experiment=debug",
            "model=tiny",
            "algorithm=reinforce",
            "data.source=generated",
            "hardware.batch_size=1000000000",
            "logger=none",
            f"data.cache_dir={tmp_path / 'cache'}",
            f"hydra.run.dir={run}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = one_error_line(proc, "error:")
    assert "hardware.batch_size=1000000000: a training step of 1,000,000,000 items would need about" in line, line
    assert "lower hardware.batch_size" in line
    assert not run.exists()


def test_memory_estimates_refuse_before_allocating(tmp_path, monkeypatch) -> None:
    """Unchecked, a scene of ~2e9 feasible pairs ran 85 s to 6.7 GB and died, an 8 GB JSON scene was read whole,
    and env.n_envs=10**8 allocated until it failed. Each is refused first, with the estimate and the limit: the
    pairs counted on a sample of UAVs, none listed; the file's size checked before it is read."""
    rng = np.random.default_rng(0)
    n, m = 100_000, 20_000  # every UAV reaches every target: 2e9 pairs, ranges within the documented bound
    scene = Scene(
        rng.random((n, 2)) * 10, np.full(n, 100.0), rng.random((m, 2)) * 10, np.ones(m, np.int64), np.ones(m), 0.1
    )
    queries = []  # the k-d tree's queries: (what, how many UAVs asked)

    class Watched(cKDTree):
        def query(self, x, *args, **kwargs):
            queries.append(("nearest targets", len(x)))  # lists pairs: what allocating them starts with
            return super().query(x, *args, **kwargs)

        def query_ball_point(self, x, r, *args, **kwargs):
            queries.append(("counts" if kwargs.get("return_length") else "pairs in range", len(x)))
            return super().query_ball_point(x, r, *args, **kwargs)

    monkeypatch.setattr(scenes, "cKDTree", Watched)
    with pytest.raises(
        MemoryBudgetError,
        match=r"about 2e\+09 feasible UAV-target pairs would need about 178\.8 GB "
        r"of memory, but .* available .*shorten the UAVs' ranges",
    ):
        feasible_pairs(scene)
    assert queries == [("counts", scenes.PAIR_SAMPLE)] and scenes.PAIR_SAMPLE < n  # counted on a sample, none listed
    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate(1 << 40)  # a 1 TB sparse file: nothing is read
    with pytest.raises(SceneFileError, match=r"huge.json: reading this JSON scene file would need about 5120\.0 GB"):
        load_scene(huge)
    settings = EnvSettings(n_uav=64)
    with pytest.raises(MemoryBudgetError, match=r"env.n_envs=1000000: 1,000,000 environments of 64 UAVs would need"):
        UAVEnv(settings, SceneDistribution(), 1_000_000, torch.device("cpu"), seed=0)
    with pytest.raises(MemoryBudgetError, match=r"algorithm.buffer_size=1000000000: a replay buffer .*lower algorithm"):
        ReplayBuffer(
            10**9,
            {
                "obs": (4, 49),
                "state": (31,),
                "next_obs": (4, 49),
                "next_state": (31,),
                "action": (4, 2),
                "reward": (4,),
                "done": (),
            },
            torch.device("cpu"),
        )
    with pytest.raises(ConfigError, match=re.escape("env.n_envs=100000000 must be in [1, 1.04858e+06]")):
        check_config(compose("algorithm=masac", "model=mlp", "env.n_envs=100000000"))


@pytest.mark.slow
def test_a_scene_too_large_for_memory_is_one_line_in_mode_solve(tmp_path) -> None:
    rng = np.random.default_rng(0)
    n, m = 100_000, 20_000
    path = tmp_path / "dense.npz"
    np.savez(
        path,
        uav_position=rng.random((n, 2)) * 10,
        uav_range=np.full(n, 100.0),
        target_position=rng.random((m, 2)) * 10,
        target_need=np.ones(m, np.int64),
        target_value=np.ones(m),
        lam=np.float64(0.1),
    )
    proc = run_cli(
        "mode=solve",
        "solver=greedy",
        "task=file",
        f"task.file={path}",
        "logger=none",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2 and "feasible UAV-target pairs would need" in one_error_line(proc, "error:")


@pytest.mark.parametrize("algorithm, n_uav", [("masac", 100), ("mappo", 100), ("coma", 100), ("mappo", 10)])
def test_the_networks_estimate_counts_what_the_algorithm_builds(algorithm, n_uav) -> None:
    """The count from the quadratic through 16, 32 and 64 UAVs equals the networks as built (on the meta device)."""
    cfg = compose(f"algorithm={algorithm}", f"env.n_uav={n_uav}")
    with torch.device("meta"):
        built = algorithm_class(algorithm).build_model(cfg)
    assert network_parameters(algorithm_class(algorithm), cfg) == pytest.approx(
        sum(p.numel() for p in built.parameters()), rel=1e-6
    )


@pytest.mark.parametrize(
    "overrides, says",
    [
        (["algorithm=masac", "env.n_uav=100000"], "algorithm=masac with env.n_uav=100000: its networks ("),
        (["algorithm=mappo", "env.n_uav=10000000"], "algorithm=mappo with env.n_uav=10000000: its networks ("),
        (
            ["mode=eval", "ckpt=pretrained", "eval.scales=[10000000]"],
            "eval.scales: labelling a test scene of 10,000,000 UAVs with the MILP",
        ),
    ],
)
def test_marl_networks_and_evaluation_scales_that_cannot_fit_are_refused_first(tmp_path, overrides, says) -> None:
    """MASAC at 100,000 UAVs passed 6 GB in 53 s, MAPPO at 10,000,000 ended in an allocator traceback, an
    evaluation at 10,000,000 UAVs labelled its probe with the MILP past 6 GB: each is one line naming the size
    and the knob before any of it is built, leaving no run directory."""
    line, _ = refusal(tmp_path, *overrides, "logger=none")
    assert says in line and "would need about" in line and "lower " in line, line


def test_a_history_is_read_as_a_stream_and_thinned_evenly(tmp_path) -> None:
    """``mode=compare`` never reads a history whole: at most ``max_rows`` training rows, every k-th (k a power of
    two), and every validation row."""
    rows = [{"step": i, "train/loss": 1.0} if i % 10 else {"step": i, "val/gap": 0.1} for i in range(1000)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    kept, stride = thinned_history(tmp_path, 100)
    training = [r["step"] for r in rows if "train/loss" in r]  # 900 rows: every 16th kept, in order
    assert stride == 16 and [r["step"] for r in kept if "train/loss" in r] == training[::16]
    assert [r["step"] for r in kept if "val/gap" in r] == list(range(0, 1000, 10))  # every validation row kept
    assert [r["step"] for r in kept] == sorted(r["step"] for r in kept)
    assert thinned_history(tmp_path, 1000) == (read_history(tmp_path), 1)


def test_mode_compare_reads_a_long_history_as_a_stream_saying_so(tmp_path, finished_run, monkeypatch) -> None:
    """A history longer than a comparison keeps is read line by line and thinned, said in one line, its run
    compared as the others (under an address-space limit, reading it whole was a MemoryError traceback)."""
    run = copy_run(finished_run, tmp_path)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    step = next(row for row in rows if any(key.startswith("train/") for key in row))
    with (run / "metrics.jsonl").open("w") as f:  # its own rows, then more training rows than a comparison keeps
        for row in [*rows, *({**step, "step": step["step"] + i} for i in range(MAX_HISTORY_ROWS + 1))]:
            f.write(json.dumps(row) + "\n")
    proc = run_cli("mode=compare", f"path={run}", "logger=none", cwd=tmp_path)
    assert "compare: run's history is long" in proc.stdout and "from one row in every 2 (" in proc.stdout
    assert (run / "comparison.md").exists()
