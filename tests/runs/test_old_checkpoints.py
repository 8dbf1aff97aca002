"""A checkpoint written before the plug-in restructuring resumes, or is refused with one line saying why
(``tests/data/before_plugins``: how they were made)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from conftest import ROOT, run_cli

from uavgnn.algorithms.checkpoint_config import stored_config
from uavgnn.algorithms.coma import COMA
from uavgnn.algorithms.env_policy import load_env_policy
from uavgnn.algorithms.registry import describe
from uavgnn.config.settings import env_settings, scene_distribution
from uavgnn.envs.uav_env import make_env
from uavgnn.infrastructure.errors import CheckpointError
from uavgnn.runs.checkpoints import load_checkpoint, load_weights

OLD = ROOT / "tests" / "data" / "before_plugins"
C = ["logger=jsonl", "train.ckpt_every=2", "train.eval_every=2", "train.log_every=2", "resume=auto"]
RUNS = {
    "imitation": [
        "experiment=debug",
        "model=tiny",
        "data.n_uav=6",
        "data.train_scenes=32",
        "data.val_scenes=8",
        "data.test_scenes=8",
        "hardware.batch_size=8",
        "data.k_max=16",  # the defaults when it was
        "model.relaxation=false",
    ],  # written
    "masac": [
        "algorithm=masac",
        "hardware.batch_size=16",
        "algorithm.learning_starts=16",
        "algorithm.buffer_size=64",
        "env.n_envs=8",
        "env.val_episodes=8",
        "model.hidden=16",
        "algorithm.critic_hidden=16",
    ],
    "coma": [
        "algorithm=coma",
        "hardware.batch_size=8",
        "algorithm.minibatches=2",
        "algorithm.data_passes=1",
        "env.val_episodes=8",
        "model.hidden=16",
        "algorithm.critic_hidden=16",
    ],
}


def resume(name: str, tmp_path: Path, overrides: list[str] | None = None):
    run = tmp_path / name
    run.mkdir()
    shutil.copy(OLD / name / "last.pt", run / "last.pt")
    proc = run_cli(
        *(RUNS[name] if overrides is None else overrides),
        *C,
        "train.steps=6",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={run}",
        cwd=tmp_path,
        check=False,
    )
    return run, proc


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, optimisers", [("imitation", ["model"]), ("masac", ["critics", "actors", "temperatures"])]
)
def test_a_checkpoint_from_before_the_plug_ins_resumes(tmp_path, name, optimisers) -> None:
    """One optimiser with a parameter group per network becomes one per network, its moments kept: AdamW has
    counted the 4 old steps and the 2 new ones."""
    run, proc = resume(name, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed from" in proc.stderr + proc.stdout
    optimiser = torch.load(run / "last.pt", weights_only=True)["optimizer"]
    assert list(optimiser) == optimisers
    assert {float(p["step"]) for state in optimiser.values() for p in state["state"].values()} == {6.0}


@pytest.mark.slow
def test_a_scene_policy_run_from_before_32_candidates_resumes_only_with_its_16_and_its_inputs(tmp_path) -> None:
    """``data.k_max``'s default went from 16 to 32: the graphs of a resumed assignment policy would
    change at scale, so the run is refused in one line naming the key and the run directory is left as it was
    (with ``data.k_max=16`` it resumes, above); MASAC, which builds no scene graph, resumes without it (above)."""
    run, proc = resume(
        "imitation", tmp_path, [o for o in RUNS["imitation"] if o not in ("data.k_max=16", "model.relaxation=false")]
    )
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(lines) == 1
    # and a model that reads the linear relaxation is not the one it trained: refused by name too
    assert "would break exact resumption: data.k_max: 16 -> 32; model.relaxation: False -> True." in lines[0]
    assert sorted(p.name for p in run.iterdir()) == ["last.pt"]


@pytest.mark.slow
def test_an_on_policy_checkpoint_from_before_the_plug_ins_is_refused_in_one_line(tmp_path) -> None:
    """Its critic has no columns for the agent's observation (added since): resuming it is one line naming the
    weights that do not fit, the run directory as it was. Its collection state, which predates the recorded
    start step, is refused by name too (the weights are checked first, so that part is loaded on its own)."""
    run, proc = resume("coma", tmp_path)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(lines) == 1
    assert "its weights do not fit what this run builds" in lines[0] and "critic.0.weight" in lines[0]
    assert sorted(p.name for p in run.iterdir()) == ["last.pt"]  # the run directory as it was

    ckpt = load_checkpoint(OLD / "coma" / "last.pt")
    cfg = stored_config(ckpt["config"])
    work = COMA(cfg, torch.device("cpu")).workload(COMA.build_model(cfg))
    with pytest.raises(
        CheckpointError,
        match="its environment and replay state do not fit .*saved before a collection recorded the step it started at",
    ):
        load_weights(
            work, ckpt["data"], OLD / "coma" / "last.pt", describe(ckpt["config"]), "environment and replay state"
        )


def test_an_on_policy_checkpoint_from_before_the_plug_ins_still_plays() -> None:
    """Its actor is what this version builds, only its critic is not: ``load_env_policy`` (``mode=eval``,
    ``compare``, the dynamics model's rollouts) loads the acting networks and plays their greedy actions,
    computed here by hand from the stored weights (Linear, ReLU, Linear, ReLU, Linear over obs and agent id)."""
    path = OLD / "coma" / "last.pt"
    policy, config = load_env_policy(path, "the test")
    w = load_checkpoint(path)["policy"]
    settings = env_settings(config)
    env = make_env(settings, scene_distribution(config), 16, "cpu", seed=0)
    for _ in range(5):
        obs, avail = env.observe(), env.available_actions()
        x = torch.cat([obs, torch.eye(settings.n_uav).expand(16, -1, -1)], -1)
        for i in (0, 2):
            x = torch.relu(x @ w[f"actor.{i}.weight"].T + w[f"actor.{i}.bias"])
        logits = (x @ w["actor.4.weight"].T + w["actor.4.bias"]).masked_fill(~avail, float("-inf"))
        action = policy(env)
        assert torch.equal(action, logits.argmax(-1))
        env.step(action)
