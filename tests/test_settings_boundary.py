"""Below the plug-ins, typed settings only. ``data/``, ``envs/``, ``dynamics/``, ``models/``,
``problem/``, ``solvers/`` and ``scoring/`` never receive the Hydra config: import-linter forbids them
``omegaconf`` (``tests/test_layers.py``), and here every call into them during a whole training run of each
registered algorithm (training, validation, checkpoints, the test phase) is watched for a config argument. The
run's config holds only the groups its algorithm declares it reads (``training_config``): a read of another ends
it."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from conftest import compose, shrink
from omegaconf import Container, DictConfig, OmegaConf, open_dict

import uavgnn
from uavgnn.algorithms.registry import algorithm_class, algorithms
from uavgnn.algorithms.run_config import MODE_GROUPS, SHARED_GROUPS, training_config
from uavgnn.modes.train import run_train

BELOW = ("data", "envs", "dynamics", "models", "problem", "solvers", "scoring", "inference")
WATCHED = tuple(str(Path(uavgnn.__file__).parent / package) + "/" for package in BELOW)


class ConfigCalls:
    """A profiler hook: the functions below the plug-ins called with a config (a group, a list of one, the
    whole config) among their arguments."""

    def __init__(self) -> None:
        self.found: set[str] = set()
        self.watched_calls = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not frame.f_code.co_filename.startswith(WATCHED):
            return
        self.watched_calls += 1
        code = frame.f_code
        for name in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]:
            if isinstance(frame.f_locals.get(name), Container):
                self.found.add(f"{code.co_filename.split('/uavgnn/')[-1]}:{code.co_name}({name})")


@pytest.mark.parametrize("name", sorted(algorithms()))
def test_no_config_reaches_below_the_plug_ins_during_a_run(name, tmp_path, isolated_dirs) -> None:
    cfg = shrink(compose(f"algorithm={name}"), tmp_path / "cache")
    with open_dict(cfg):
        cfg.train.update(steps=2, eval_every=2, ckpt_every=2, log_every=1)
        cfg.logger.name = "none"
    cfg = training_config(cfg, [])
    reads = algorithm_class(name).reads
    assert [group for group in (*SHARED_GROUPS, *MODE_GROUPS) if group in cfg] == list(reads)
    assert isinstance(cfg, DictConfig) and OmegaConf.is_config(cfg.task)  # what the hook looks for
    calls = ConfigCalls()
    sys.setprofile(calls)
    try:
        run_train(cfg, tmp_path / "run")
    finally:
        sys.setprofile(None)
    assert (tmp_path / "run" / "summary.json").is_file()
    assert calls.watched_calls > 100  # the run went through the layers below (the hook saw it)
    assert not calls.found, f"the config passed below the plug-ins: {sorted(calls.found)}"


def test_the_watch_sees_a_config_passed_below() -> None:
    """The hook is not blind: a scene generator handed the ``task`` group itself is caught."""
    from uavgnn.problem.generator import generate_scenes

    task = compose().task
    calls = ConfigCalls()
    sys.setprofile(calls)
    try:
        with contextlib.suppress(Exception):  # whether duck typing carries it through does not matter
            generate_scenes(task, 4, 1, seed=0)
    finally:
        sys.setprofile(None)
    assert "problem/generator.py:generate_scenes(dist)" in calls.found


def test_an_override_of_a_group_the_algorithm_does_not_read_is_said(caplog) -> None:
    """``algorithm=masac data.k_max=8`` would change nothing: said in one warning naming what MASAC reads, and
    the group is left out."""
    cfg = compose("algorithm=masac", "data.k_max=8")
    kept = training_config(cfg, ["algorithm=masac", "data.k_max=8", "env.n_uav=8"])
    assert "data" not in kept and kept.env.n_uav == cfg.env.n_uav
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert said == [
        "data.k_max=8: algorithm=masac does not read the data group (its training reads task, env): left out"
    ]
