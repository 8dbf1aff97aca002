"""Torch's CPU threads hold up when the machine is shared. One thread per process by default;
``hardware.threads=0`` is every core the process may use (its affinity mask, a cgroup's quota, ``OMP_NUM_THREADS``,
which joblib's sweep workers get as cores / parallel jobs); no setting goes above that; the run record names the
threads the run really had."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
import torch
from conftest import run_cli

from uavgnn.config.schemas import HardwareConfig
from uavgnn.infrastructure import console, threads
from uavgnn.infrastructure import device as runtime
from uavgnn.infrastructure.threads import apply_threads, available_cores, cpu_threads


@pytest.fixture
def four_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process allowed on four cores, no cgroup quota, no OMP_NUM_THREADS."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(threads, "CPU_QUOTA", Path("/nonexistent/cpu.max"))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


def test_the_default_is_one_thread_per_process() -> None:
    assert HardwareConfig().threads == 1


def test_zero_is_every_core_the_process_may_use_and_no_setting_goes_above_it(four_cores, monkeypatch) -> None:
    assert available_cores() == 4
    assert [cpu_threads(setting) for setting in (0, 1, 3, 4, 9)] == [4, 1, 3, 4, 4]
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # e.g. a joblib worker of a sweep of two on four cores
    assert available_cores() == 2 and [cpu_threads(setting) for setting in (0, 1, 3)] == [2, 1, 2]


def test_a_cgroup_quota_caps_the_cores(four_cores, monkeypatch, tmp_path) -> None:
    quota = tmp_path / "cpu.max"
    quota.write_text("150000 100000\n")  # docker --cpus=1.5
    assert available_cores(quota) == 1
    quota.write_text("max 100000\n")
    assert available_cores(quota) == 4


def test_applying_a_setting_sets_torch_and_says_once_when_it_is_lowered(four_cores, caplog) -> None:
    before = torch.get_num_threads()
    try:
        with caplog.at_level("WARNING"):
            assert apply_threads(9) == 4 and torch.get_num_threads() == 4
            apply_threads(9)
        assert [r.getMessage() for r in caplog.records] == [
            "hardware.threads=9: this process may use 4 cores, so 4 threads"
        ]
        assert apply_threads(1) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
def test_the_run_record_names_the_threads_the_run_had(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # torch's own default would be 2 threads here
    out = tmp_path / "run"
    run_cli(
        "experiment=debug",
        "model=tiny",
        "data.n_uav=6",
        "data.train_scenes=16",
        "data.val_scenes=4",
        "data.test_scenes=4",
        "hardware.batch_size=8",
        "train.steps=2",
        "logger=none",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={out}",
        cwd=tmp_path,
    )
    assert json.loads((out / "summary.json").read_text())["manifest"]["threads"] == 1
    hardware = next(line for line in (out / "run.log").read_text().splitlines() if "hardware: " in line)
    assert hardware.split(", ")[-1].startswith("1 torch thread (")


def test_a_gpu_preset_without_a_gpu_and_a_compiled_step_say_so_once(monkeypatch, caplog) -> None:
    """``hardware=high_mem optim=gpu`` on a machine without a GPU runs on the CPU, and a compiled step spends
    minutes compiling: each is said in one warning, once a run."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # this machine, whatever runs the test
    monkeypatch.setattr(console, "_said", set())
    logger = logging.getLogger(console.NOTES)
    monkeypatch.setattr(logger, "disabled", False)  # an earlier Hydra run in this worker may have disabled it
    monkeypatch.setattr(logger, "propagate", True)
    with caplog.at_level(logging.WARNING, logger=logger.name):
        assert runtime.resolve_device("auto") == runtime.resolve_device("auto") == torch.device("cpu")
        assert runtime.resolve_device("cpu") == torch.device("cpu")
        step = runtime.maybe_compile(torch.nn.Linear(2, 2), enabled=True)
        runtime.maybe_compile(torch.nn.Linear(2, 2), enabled=False)
    said = [record.getMessage() for record in caplog.records]
    assert (
        len(said) == 2
        and said[0].startswith("hardware.device=auto: no CUDA device here, so the run goes on the CPU")
        and "hardware=cpu" in said[0]
    )
    assert said[1].startswith("optim.compile: the training step is compiled at its first call") and step is not None
