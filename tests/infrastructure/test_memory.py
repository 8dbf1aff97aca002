"""Issue 62: one memory estimate before every large allocation, against the limit the process really has.

The audit: ``mode=solve solver=model`` on a 2,000,000-UAV scene grew to 17 GB with no estimate; the estimates
read physical RAM and ignored ``ulimit -v`` (a 9e7-pair scene under an 8 GB limit died in a numpy traceback);
``hardware.batch_size=10**9`` with generated scenes allocated 64 GB, ended in a traceback and left a run
directory. Each is refused first now, in one line naming the size and the knob, leaving nothing behind.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from test_faults import one_error_line

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
    """``mode=solve solver=model`` estimates the scoring (11 KB a UAV for the pretrained policy, measured in
    benchmarks/bench_memory.py) before building the graph: 600,000 UAVs under a 4 GB limit is one line."""
    run = tmp_path / "run"
    proc = run_limited(
        4 * GB,
        "mode=solve",
        "solver=model",
        "ckpt=pretrained",
        "solve.n_uav=600000",
        "solve.gap_reference=false",
        "logger=none",
        "hardware.threads=1",
        f"hydra.run.dir={run}",
        cwd=tmp_path,
    )
    line = one_error_line(proc, "error:")
    need = (600_000 * 32 * (5 * 64 + 32) + 2**28) / GB  # 32 candidates, hidden 64: 11 KB a UAV, and 256 MB
    assert f"scoring a scene of 600,000 UAVs with the model would need about {need:.1f} GB" in line, line
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
