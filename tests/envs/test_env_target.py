"""Your own environment (``env.target``, a ``_target_``-style path to a ``UAVEnv`` subclass): the algorithms
train and validate on it, its dynamics are the ones stepped, and a wrong path is one clear line."""

from __future__ import annotations

import pytest
import torch
from conftest import compose, refusal, run_cli

from uavgnn.algorithms.registry import check_config
from uavgnn.envs.policies import random_policy, run_episodes
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import UAVEnv, make_env
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.infrastructure.user_code import import_named
from uavgnn.problem.scenes import SceneDistribution

ENVIRONMENTS = '''
import os

import torch
from uavgnn.envs.uav_env import UAVEnv


class Frozen(UAVEnv):
    """UAVs that never move, whatever they are told."""

    def velocity_command(self, action):
        return torch.zeros(self.n_envs, self.n_uav, 2, device=self.device)


class Counted(UAVEnv):
    """The default environment, writing how many environments each instance steps to $ENV_LOG."""

    def __init__(self, settings, dist, n_envs, device, seed, **kwargs):
        super().__init__(settings, dist, n_envs, device, seed, **kwargs)
        with open(os.environ["ENV_LOG"], "a") as log:
            log.write(f"{n_envs}\\n")


class Broken(UAVEnv):
    """An environment whose constructor fails in the user's own code."""

    def __init__(self, settings, dist, n_envs, device, seed, **kwargs):
        raise RuntimeError("no licence server at 10.0.0.7\\nsecond line of detail")


class Strict(UAVEnv):
    """An environment refusing its settings with our own one-line error."""

    def __init__(self, settings, dist, n_envs, device, seed, **kwargs):
        from uavgnn.infrastructure.errors import ConfigError
        raise ConfigError("env.horizon=7: Strict wants 8")


class Exploding(UAVEnv):
    """An environment whose step fails in the user's own code, a few steps in."""

    def step(self, action):
        return self.check_wind(super().step(action))

    def check_wind(self, step):
        if self.t.max() >= 3:
            raise ValueError("wind model out of range")
        return step


NOT_AN_ENV = 3
'''


@pytest.fixture
def my_envs(tmp_path, monkeypatch) -> str:
    (tmp_path / "my_envs.py").write_text(ENVIRONMENTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # for the runs in subprocesses
    monkeypatch.setenv("ENV_LOG", str(tmp_path / "envs.log"))
    return "my_envs"


def test_your_environment_is_the_one_stepped(my_envs) -> None:
    settings, dist = EnvSettings(target=f"{my_envs}.Frozen"), SceneDistribution()
    env = make_env(settings, dist, 6, "cpu", seed=0)
    assert type(env).__name__ == "Frozen"
    scores = run_episodes(env, random_policy)
    assert (scores.trajectory == scores.trajectory[0]).all()  # environment 0's UAVs stay where they started, every step
    moving = run_episodes(make_env(EnvSettings(), dist, 6, "cpu", seed=0), random_policy)
    assert type(make_env(EnvSettings(), dist, 1, "cpu", seed=0)) is UAVEnv
    assert not torch.equal(moving.trajectory[-1], moving.trajectory[0])


def test_masac_trains_and_validates_on_your_environment(tmp_path, my_envs) -> None:
    run_cli(
        "algorithm=masac",
        f"env.target={my_envs}.Counted",
        "env.n_envs=8",
        "env.val_episodes=16",
        "algorithm.learning_starts=16",
        "algorithm.buffer_size=512",
        "model.hidden=16",
        "algorithm.critic_hidden=16",
        "hardware.batch_size=32",
        "train.steps=10",
        "train.eval_every=5",
        "train.ckpt_every=5",
        "logger=jsonl",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    made = (tmp_path / "envs.log").read_text().split()
    assert "8" in made and "16" in made  # the training environments and the validation episodes


def test_a_wrong_environment_is_one_line(tmp_path, my_envs) -> None:
    with pytest.raises(ConfigError, match=r"env.target=my_envs.NOT_AN_ENV: 3 is not a subclass of .*UAVEnv"):
        make_env(EnvSettings(target="my_envs.NOT_AN_ENV"), SceneDistribution(), 2, "cpu", seed=0)
    cfg = compose("algorithm=masac", "model=mlp", "env.target=my_envs.Nowhere")
    with pytest.raises(ConfigError, match="env.target=my_envs.Nowhere: cannot import it"):
        check_config(cfg)  # before any work
    cfg = compose("env.target=my_envs.Frozen")  # the main job: no environment
    with pytest.raises(ConfigError, match="env.target with algorithm=imitation: it trains on scenes"):
        check_config(cfg)


@pytest.mark.parametrize("path", ["..x", "x.", ".x", "a..b", "my-pkg.Env", "mypkg.1Env", "Env", "", "a. b"])
def test_a_malformed_path_is_one_line_naming_key_and_value(path) -> None:
    with pytest.raises(ConfigError) as caught:
        import_named(path, "env.target")
    assert str(caught.value) == (
        f"env.target={path}: not a dotted path of Python names; give module.name (e.g. "
        "mypkg.module.MyClass), importable from where you run"
    )


def test_a_malformed_env_target_ends_the_run_in_one_line(tmp_path) -> None:
    line, _ = refusal(tmp_path, "experiment=debug", "algorithm=mappo", "env.target=..x", "hardware.threads=1")
    assert line == (
        "error: env.target=..x: not a dotted path of Python names; give "
        "module.name (e.g. mypkg.module.MyClass), importable from where you run"
    )


def test_your_environment_failing_to_build_is_one_line(tmp_path, my_envs) -> None:
    dist = SceneDistribution()
    with pytest.raises(ConfigError) as caught:
        make_env(EnvSettings(target="my_envs.Broken"), dist, 2, "cpu", seed=0)
    assert str(caught.value) == (
        "env.target=my_envs.Broken: Broken(...) raised RuntimeError: no licence server at 10.0.0.7"
    )
    with pytest.raises(ConfigError) as caught:  # our own one-line errors pass through as they are
        make_env(EnvSettings(target="my_envs.Strict"), dist, 2, "cpu", seed=0)
    assert str(caught.value) == "env.horizon=7: Strict wants 8"
    with pytest.raises(ValueError, match="^env.action: unknown action mode 'sideways'") as caught:  # UAVEnv's own
        make_env(EnvSettings(action="sideways"), dist, 2, "cpu", seed=0)
    assert not isinstance(caught.value, ConfigError)
    line, _ = refusal(
        tmp_path,
        "experiment=debug",
        "algorithm=mappo",
        "env.target=my_envs.Broken",
        "env.val_episodes=4",
        "hardware.batch_size=4",
        "algorithm.minibatches=2",
        "hardware.threads=1",
        "logger=none",
    )
    assert line == "error: env.target=my_envs.Broken: Broken(...) raised RuntimeError: no licence server at 10.0.0.7"


def test_your_environment_raising_in_step_names_its_class_and_shows_your_frames(tmp_path, my_envs) -> None:
    """Your ``step`` raising mid-training: the class, method and exception in one line, then your frames only
    (not the loop's 37 lines); nothing was trained, so no run directory is left."""
    line, proc = refusal(
        tmp_path, "experiment=debug", "algorithm=mappo", f"env.target={my_envs}.Exploding", "hardware.threads=1"
    )
    assert line == "error: env.target=my_envs.Exploding: Exploding.step raised ValueError: wind model out of range"
    shown = proc.stderr.split(line, 1)[1].strip().splitlines()
    assert shown[0] == "in your code (most recent call last):"
    files = [entry for entry in shown[1:] if entry.strip().startswith("File ")]
    assert len(files) == 2 and all(str(tmp_path / "my_envs.py") in entry for entry in files)
    assert ", in step" in files[0] and ", in check_wind" in files[1] and 'raise ValueError("wind' in shown[-1]
