"""Your own scene generator (``task.generator``, a ``_target_``-style path): a training run on its scenes, its
scenes in the cached splits (named by its source code too), and one clear line when it is wrong."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import compose, run_cli

from uavgnn.config.settings import split_settings
from uavgnn.data.splits import load_split
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.problem.generator import distribution_key, generate_scenes
from uavgnn.problem.scenes import SceneDistribution

GENERATOR = '''
import numpy as np
from uavgnn.problem.scenes import Scene


def on_a_line(dist, n_uav, count, seed):
    """UAVs on the x axis, targets on the line y = 1: every scene its own positions along them."""
    rng = np.random.default_rng(seed)
    scenes = []
    for _ in range(count):
        n_target = dist.n_targets(n_uav)
        uav = np.stack([rng.uniform(0, 4, n_uav), np.zeros(n_uav)], 1)
        target = np.stack([rng.uniform(0, 4, n_target), np.ones(n_target)], 1)
        need = rng.integers(1, 3, n_target)
        scenes.append(Scene(uav, np.full(n_uav, 6.0), target, need, need * 1.5, dist.lam))
    return scenes


def too_few(dist, n_uav, count, seed):
    return on_a_line(dist, n_uav, count, seed)[:-1]
'''


@pytest.fixture
def my_generator(tmp_path, monkeypatch) -> str:
    (tmp_path / "my_scenes.py").write_text(GENERATOR)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # for the runs in subprocesses
    return "my_scenes.on_a_line"


def test_a_custom_generator_trains_and_its_scenes_are_the_splits(tmp_path, my_generator) -> None:
    run_cli(
        "experiment=debug",
        "model=tiny",
        "data.n_uav=6",
        "data.train_scenes=32",
        "data.val_scenes=8",
        "data.test_scenes=8",
        "hardware.batch_size=8",
        "logger=jsonl",
        f"task.generator={my_generator}",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] > 0 and np.isfinite(summary["best_val_optimality_gap"])
    (train,) = [d for d in (tmp_path / "cache").iterdir() if d.name.startswith("train-") and d.is_dir()]
    manifest = json.loads((train / "manifest.json").read_text())
    assert manifest["key"]["distribution"]["generator"] == my_generator
    assert len(manifest["key"]["distribution"]["generator_source"]) == 64  # a changed generator: a new split
    cfg = compose(
        "experiment=debug",
        "data.n_uav=6",
        "data.train_scenes=32",
        f"task.generator={my_generator}",
        f"data.cache_dir={tmp_path / 'cache'}",
    )
    stored = load_split(split_settings(cfg), "train").scenes()  # the cached split the run trained on (a cache hit)
    drawn = generate_scenes(SceneDistribution(generator=my_generator), 6, 32, seed=manifest["key"]["seed"])
    assert len(stored) == 32 and all(np.allclose(s.uav_pos[:, 1], 0) for s in stored)  # on the generator's line
    for a, b in zip(stored, drawn):
        np.testing.assert_allclose(a.uav_pos, b.uav_pos)
        np.testing.assert_allclose(a.target_pos, b.target_pos)


def test_without_a_generator_the_cache_keys_are_as_before() -> None:
    key = distribution_key(SceneDistribution())
    assert "generator" not in key and "generator_source" not in key and key["positions"] == "uniform"


def test_a_wrong_generator_is_one_line(tmp_path, my_generator) -> None:
    with pytest.raises(ConfigError, match="task.generator=my_scenes.too_few: returned 3 scenes for 4"):
        generate_scenes(SceneDistribution(generator="my_scenes.too_few"), 5, 4, seed=0)
    with pytest.raises(ConfigError, match="task.generator=my_scenes.nope: cannot import it"):
        generate_scenes(SceneDistribution(generator="my_scenes.nope"), 5, 4, seed=0)
    proc = run_cli(
        "experiment=debug",
        "algorithm=masac",
        f"task.generator={my_generator}",
        "logger=jsonl",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
        check=False,
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "the UAV environment draw their own" in errors[0]
