"""The Python API (``uavgnn.api``): the README's "From Python" example runs as written, on the pretrained
policy and the checkpoint of a small MASAC run, and gives what the solvers and the environment give directly."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import ROOT, run_cli

from uavgnn.api import SceneDistribution, generate_scenes, load_env_policy, play, solve
from uavgnn.envs.policies import run_episodes
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.settings import env_settings, scene_distribution

MASAC = ["algorithm=masac", "logger=jsonl", "env.n_envs=8", "env.val_episodes=8", "algorithm.learning_starts=16",
         "algorithm.buffer_size=512", "model.hidden=16", "algorithm.critic_hidden=16", "hardware.batch_size=32",
         "train.steps=20", "train.eval_every=10", "train.ckpt_every=10"]


def readme_example() -> str:
    """The first python block of the README's "From Python" section."""
    section = (ROOT / "README.md").read_text().split("## From Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_the_readmes_python_example_runs_as_written(tmp_path, capsys) -> None:
    run_cli(*MASAC, f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'masac'}", cwd=tmp_path)
    code = readme_example()
    (path,) = re.findall(r'"(outputs/[^"]+/best\.pt)"', code)  # the environment policy's
    code = code.replace(path, str(tmp_path / "masac" / "best.pt"))
    exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - the documented example, as a user runs it
    printed = capsys.readouterr().out.splitlines()
    milp, greedy = map(float, printed[0].split())
    assert milp >= greedy > 0  # the exact solver is at least as good as the heuristic
    assert 0 < float(printed[1].split()[0]) <= milp + 1e-9  # the pretrained policy's, at 16x its training size
    assert "'return':" in printed[-1] and "'completion_rate':" in printed[-1]

    # play() is run_episodes on the checkpoint's own environment and scenes
    policy, config = load_env_policy(tmp_path / "masac" / "best.pt")
    env = UAVEnv(env_settings(config), scene_distribution(config), 4, torch.device("cpu"), 3)
    torch.testing.assert_close(play(policy, config, episodes=4, seed=3).episode_return,
                               run_episodes(env, policy).episode_return)


def test_the_api_solvers_are_the_programs() -> None:
    scene = generate_scenes(SceneDistribution(), n_uav=12, count=1, seed=1)[0]
    exact = solve(scene, "milp")
    assert exact.status == "optimal" and exact.objective >= solve(scene, "greedy").objective
