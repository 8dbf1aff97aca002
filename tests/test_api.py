"""The Python API (``uavgnn.api``): the documented example (docs/python-api.md, "The API") runs as written, on the
pretrained policy and the checkpoint of a small MASAC run, and gives what the solvers and the environment give
directly."""

from __future__ import annotations

import json
import re

import pytest
import torch
from conftest import MASAC, ROOT, run_cli

from uavgnn.api import SceneDistribution, generate_scenes, load_env_policy, play, solve
from uavgnn.config.settings import env_settings, scene_distribution
from uavgnn.envs.policies import run_episodes
from uavgnn.envs.uav_env import UAVEnv


def readme_example() -> str:
    """The first python block of docs/python-api.md's "The API" section (the README links it)."""
    section = (ROOT / "docs" / "python-api.md").read_text().split("## The API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_the_readmes_python_example_runs_as_written(tmp_path, capsys) -> None:
    run_cli(*MASAC, f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'masac'}", cwd=tmp_path)
    code = readme_example()
    (path,) = re.findall(r'"(outputs/[^"]+/best\.pt)"', code)  # the environment policy's
    code = code.replace(path, str(tmp_path / "masac" / "best.pt"))
    exec(compile(code, "docs/python-api.md", "exec"), {})  # noqa: S102 - the documented example, as a user runs it
    printed = capsys.readouterr().out.splitlines()
    milp, greedy = map(float, printed[0].split())
    assert milp >= greedy > 0  # the exact solver is at least as good as the heuristic
    assert 0 < float(printed[1].split()[0]) <= milp + 1e-9  # the pretrained policy's, at 16x its training size
    assert "'return':" in printed[-1] and "'completion_rate':" in printed[-1]

    # play() is run_episodes on the checkpoint's own environment and scenes
    policy, config = load_env_policy(tmp_path / "masac" / "best.pt")
    env = UAVEnv(env_settings(config), scene_distribution(config), 4, torch.device("cpu"), 3)
    torch.testing.assert_close(
        play(policy, config, episodes=4, seed=3).episode_return, run_episodes(env, policy).episode_return
    )


def test_the_api_solvers_are_the_programs() -> None:
    scene = generate_scenes(SceneDistribution(), n_uav=12, count=1, seed=1)[0]
    exact = solve(scene, "milp")
    assert exact.status == "optimal" and exact.objective >= solve(scene, "greedy").objective


TINY = [
    "experiment=debug",
    "model=tiny",
    "data.n_uav=6",
    "data.train_scenes=16",
    "data.val_scenes=4",
    "data.test_scenes=4",
    "hardware.batch_size=8",
    "train.steps=2",
    "logger=none",
    "hardware.threads=1",
]


@pytest.mark.slow
def test_train_from_python_is_the_command_lines_run(tmp_path, monkeypatch) -> None:
    """``uavgnn.api.train(overrides)`` makes the run ``python run.py <overrides>`` makes: the same
    files, the same recorded config and overrides, the same results (all but the timings)."""
    from uavgnn.api import train

    overrides = [*TINY, f"data.cache_dir={tmp_path / 'cache'}"]
    run_cli(*overrides, f"hydra.run.dir={tmp_path / 'cli'}", cwd=tmp_path)
    monkeypatch.chdir(tmp_path)
    run_dir, summary = train(overrides, run_dir=tmp_path / "api")
    cli = tmp_path / "cli"
    assert run_dir == tmp_path / "api"
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(p.name for p in cli.iterdir())
    for name in ("config.yaml", "overrides.yaml"):
        assert (run_dir / ".hydra" / name).read_text() == (cli / ".hydra" / name).read_text(), name
    timed = re.compile(r"(_s|_per_s|_mb)$")
    results = {k: v for k, v in summary.items() if k.startswith(("best_val_", "test/")) and not timed.search(k)}
    on_cli = json.loads((cli / "summary.json").read_text())
    assert results and results == {k: on_cli[k] for k in results}
    assert summary == json.loads((run_dir / "summary.json").read_text())


def test_each_policy_loader_names_the_other_for_the_others_checkpoint(tmp_path) -> None:
    """``load_policy`` on a MAPPO checkpoint said ``ckpt= takes an assignment policy``; each loader now names the
    one that loads it, in one line."""
    from uavgnn.api import load_policy
    from uavgnn.infrastructure.errors import CheckpointError
    from uavgnn.runs.checkpoints import save_checkpoint

    mappo = tmp_path / "mappo.pt"
    save_checkpoint(mappo, {"policy": {}}, {"algorithm": {"name": "mappo"}, "model": {"name": "mlp"}})
    with pytest.raises(CheckpointError) as caught:
        load_policy(mappo)
    assert f"load_env_policy('{mappo}') loads it" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(CheckpointError, match=r"is an assignment policy: load_policy\('pretrained'\) loads it"):
        load_env_policy("pretrained")
    with pytest.raises(CheckpointError, match="no such file"):  # the loader's own error otherwise
        load_policy(tmp_path / "missing.pt")


def test_train_refuses_another_mode_and_a_typo_as_exceptions(tmp_path, monkeypatch) -> None:
    from uavgnn.api import train
    from uavgnn.infrastructure.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"mode=eval: train\(\) runs mode=train"):
        train(["mode=eval"])
    with pytest.raises(ConfigError, match=r"train.stpes=3: no key 'train.stpes'; did you mean train.steps=3\?"):
        train(["train.stpes=3"])
    assert not any(tmp_path.glob("outputs"))
