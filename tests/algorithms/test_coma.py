"""COMA: TD(lambda) returns against the recursion, the batched update against the per-agent loops, masking of
infeasible headings, and algorithm=coma in the shared loop with exact resume."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import compose, resume_is_exact

from uavgnn.algorithms.coma import COMAAgents, COMASettings, coma_loss
from uavgnn.algorithms.coma_naive import naive_loss
from uavgnn.algorithms.registry import check_config
from uavgnn.algorithms.rl_math import td_lambda_targets
from uavgnn.config.settings import env_settings
from uavgnn.envs.on_policy import Episodes
from uavgnn.envs.settings import HEADINGS, EnvSettings
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.problem.scenes import SceneDistribution


def test_td_lambda_returns_match_the_hand_worked_recursion() -> None:
    # one agent, 3 steps, ends at step 1: G_1 = r_1 = 2; G_0 = r_0 + g((1-l) Q_1 + l G_1) = 1 + 0.9 (0.5*4 + 0.5*2)
    reward = torch.tensor([[1.0, 2.0, 5.0]])[..., None]
    done = torch.tensor([[0.0, 1.0, 0.0]])
    next_q = torch.tensor([[4.0, 7.0, 0.0]])[..., None]
    returns = td_lambda_targets(reward, done, next_q, gamma=0.9, lam=0.5)
    torch.testing.assert_close(returns[0, :2, 0], torch.tensor([1.0 + 0.9 * (0.5 * 4 + 0.5 * 2), 2.0]))
    assert returns[0, 2, 0] == 5.0  # a step after the end starts a new chain (and is masked in the loss)


def random_episodes(b: int, t: int, n: int, s: COMASettings, dtype=torch.float64) -> Episodes:
    g = torch.Generator().manual_seed(1)
    avail = torch.rand(b, t, n, s.n_actions, generator=g) > 0.3
    avail[..., 0] = True
    action = torch.multinomial(avail.double().view(-1, s.n_actions), 1, generator=g).view(b, t, n)
    done = torch.zeros(b, t)
    done[torch.arange(b), torch.randint(2, t, (b,), generator=g)] = 1
    mask = 1 - (done.cumsum(1) - done)
    return Episodes(
        torch.randn(b, t, n, s.obs_dim, generator=g, dtype=dtype),
        torch.randn(b, t, s.state_dim, generator=g, dtype=dtype),
        avail,
        action,
        torch.randn(b, t, n, generator=g, dtype=dtype),
        done.to(dtype),
        mask.to(dtype),
    )


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_the_batched_update_has_the_losses_and_gradients_of_the_per_agent_loops(dtype, tol) -> None:
    torch.manual_seed(0)
    s = COMASettings(3, 10, 12, 9, 16, 2, 16, 2, 0.9, 0.7, 0.01)
    agents = COMAAgents(s).to(dtype)
    for p in agents.target_critic.parameters():  # a target that differs from the critic
        p.data += 0.1 * torch.randn_like(p)
    ep = random_episodes(6, 7, 3, s, dtype)
    params = [p for p in agents.parameters() if p.requires_grad]
    batched, stats = coma_loss(agents, ep)
    naive, naive_stats = naive_loss(agents, ep)
    torch.testing.assert_close(batched, naive, rtol=tol, atol=tol)
    torch.testing.assert_close(stats["critic_loss"], naive_stats["critic_loss"], rtol=tol, atol=tol)
    for a, b in zip(torch.autograd.grad(batched, params), torch.autograd.grad(naive, params)):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def test_infeasible_headings_are_masked_and_never_sampled() -> None:
    settings = EnvSettings(n_uav=3, action="discrete")
    env = UAVEnv(settings, SceneDistribution(), 2, torch.device("cpu"), seed=0)
    env.pos[0, 0] = torch.tensor([0.0, 0.0])  # in a corner: west, south-west, south (and their kin) leave the arena
    env.energy[1, 2] = 0.0  # grounded: only stay
    avail = env.available_actions()
    leaves = ((env.pos[0, 0] + HEADINGS * settings.max_speed) < 0).any(-1)
    assert avail[0, 0].tolist() == (~leaves).tolist() and avail[1, 2].tolist() == [True] + [False] * 8
    s = COMASettings(3, settings.obs_dim(), settings.state_dim(SceneDistribution()), 9, 8, 1, 8, 1, 0.9, 0.8, 0.0)
    agents = COMAAgents(s)
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        action = agents.act(env.observe(), avail, g)
        assert avail.gather(-1, action[..., None]).all()


def compose_coma(*overrides: str):
    """COMA at a test's budget: small networks, two minibatches, a row every 4 steps, a checkpoint every 6."""
    return compose(
        "algorithm=coma",
        "logger=jsonl",
        "hardware.batch_size=4",
        "algorithm.minibatches=2",
        "algorithm.data_passes=2",
        "algorithm.target_update_every=3",
        "env.val_episodes=8",
        "model.hidden=16",
        "algorithm.critic_hidden=16",
        "train.log_every=4",
        "train.eval_every=6",
        "train.ckpt_every=6",
        *overrides,
    )


def test_the_targets_of_a_collection_are_each_minibatchs_own_until_the_target_critic_moves() -> None:
    """The workload computes the critic's targets for the whole collection once; each minibatch's are those its
    own episodes give with the target critic of the moment, also after a target update in mid-collection."""
    from uavgnn.algorithms.coma import COMA, critic_targets

    cfg = compose_coma()
    agents = COMA.build_model(cfg)
    work = COMA(cfg, torch.device("cpu")).workload(agents)
    for step in range(4):
        if step == 2:  # the critic learns something and the target copies it
            with torch.no_grad():
                for p in agents.critic.parameters():
                    p.add_(0.1 * torch.randn_like(p))
            before = work.batch(step, 0, 4).returns
            agents.sync_target()
        batch = work.batch(step, 0, 4)
        own = Episodes(*(getattr(batch, name) for name in Episodes.__dataclass_fields__))
        torch.testing.assert_close(batch.returns, critic_targets(agents, own), rtol=1e-6, atol=1e-6)
        if step == 2:
            assert not torch.allclose(before, batch.returns)  # they moved with the target critic


def test_a_minibatch_after_a_new_batch_size_comes_from_a_new_collection() -> None:
    """Out-of-memory halving: new environments and no episodes; the next minibatch collects first."""
    from uavgnn.algorithms.coma import COMA
    from uavgnn.envs.on_policy import EpisodeWorkload

    cfg = compose_coma()
    work = EpisodeWorkload(
        COMA(cfg, torch.device("cpu")).env_run(), COMA.build_model(cfg), torch.device("cpu"), cfg.hardware.batch_size, 2
    )
    assert len(work.batch(0, 0, 4)) == 4
    work.restart(1, 2)
    assert work.episodes is None
    assert len(work.batch(1, 0, 2)) == 2 and work.collected_at == 1


def test_a_resumed_coma_run_repeats_the_uninterrupted_one_exactly(tmp_path) -> None:
    """Stopped mid-collection (step 6 of rounds of 4): the episodes, environments and target come back."""
    a, b = resume_is_exact(compose_coma, tmp_path, half=6)
    assert a["algorithm"]["updates"] == b["algorithm"]["updates"] == 12


def test_coma_settings_are_checked_before_any_work() -> None:
    with pytest.raises(
        ConfigError, match="env.action=continuous with algorithm=coma: it acts with discrete or goto actions"
    ):
        check_config(compose_coma("env=default"))
    with pytest.raises(ConfigError, match="give a number, not auto"):
        check_config(compose_coma("hardware.batch_size=auto"))
    with pytest.raises(ConfigError, match="model=tiny with algorithm=coma: its networks are model=mlp$"):
        check_config(compose_coma("model=tiny"))


def test_coma_trains_and_is_compared_with_the_planner(tmp_path: Path) -> None:
    import json

    from uavgnn.modes.train import run_train

    out = tmp_path / "run"
    run_train(compose_coma("train.steps=4", "train.eval_every=4", "train.ckpt_every=4"), out)
    summary = json.loads((out / "summary.json").read_text())
    assert [r["method"] for r in summary["test"]] == [
        "coma",
        "scripted planner",
        "decentralised planner",
        "CBBA",
        "nearest target",
        "random",
    ]
    assert (out / "trajectories.png").stat().st_size > 0


def test_mode_info_checks_that_the_environment_and_every_marl_algorithm_run_here() -> None:
    """Every algorithm's own update runs here (``mode=info`` runs each one that has one), and each says it has
    one exactly when it brings its own ``self_check``."""
    from uavgnn.algorithms.registry import algorithms
    from uavgnn.modes.info import trial

    ran = {}
    for name, algorithm in algorithms().items():
        result = trial(name, lambda: ran.setdefault(name, algorithm.self_check(torch.device("cpu"))))
        assert result["ok"] and result["error"] == "", result["error"]
    assert ran == {name: "self_check" in vars(algorithm) for name, algorithm in algorithms().items()}


def test_masac_and_coma_checkpoints_are_compared_on_the_same_scenes(tmp_path: Path) -> None:
    from uavgnn.algorithms.env_policy import compare_checkpoints
    from uavgnn.algorithms.registry import make_model
    from uavgnn.infrastructure.errors import CheckpointError
    from uavgnn.runs.checkpoints import save_checkpoint

    def checkpoint(name: str, cfg) -> str:
        save_checkpoint(tmp_path / name, {"policy": make_model(cfg).state_dict()}, cfg)
        return str(tmp_path / name)

    masac_cfg = compose(
        "algorithm=masac", "logger=jsonl", "env.val_episodes=8", "model.hidden=16", "algorithm.critic_hidden=16"
    )
    masac = checkpoint("masac.pt", masac_cfg)
    coma = checkpoint("coma.pt", compose_coma("env=goto", "seed=3"))
    rows = compare_checkpoints([masac, coma], episodes=16, horizon=6, device=torch.device("cpu"))
    assert [(r["method"], r["actions"]) for r in rows] == [
        (f"masac seed 0 ({tmp_path.name})", "continuous"),
        ("scripted planner", "continuous"),
        ("decentralised planner", "continuous"),
        ("CBBA", "continuous"),
        ("nearest target", "continuous"),
        ("random", "continuous"),
        (f"coma seed 3 ({tmp_path.name})", "goto"),
        ("scripted planner", "goto"),
        ("decentralised planner", "goto"),
        ("CBBA", "goto"),
        ("nearest target", "goto"),
        ("random", "goto"),
    ]
    planner = [r for r in rows if r["method"] == "scripted planner"]
    assert planner[0]["return"] == planner[1]["return"] and planner[0]["of_planner"] == 1.0  # the same scenes
    other = checkpoint("six.pt", compose_coma("env=goto", "env.n_uav=6"))
    with pytest.raises(CheckpointError, match="six.pt: trained on 6 UAVs .* not the same episodes"):
        compare_checkpoints([coma, other], episodes=4, horizon=3, device=torch.device("cpu"))
    seeing = checkpoint("seeing.pt", compose_coma("env=goto", "env.goto_home=true"))
    with pytest.raises(
        CheckpointError, match="seeing.pt: its UAVs observe .*self_features=8.* not what the other goto"
    ):
        compare_checkpoints([coma, seeing], episodes=4, horizon=3, device=torch.device("cpu"))
    in_range = checkpoint("in_range.pt", compose_coma("env=goto", "env.reachable_targets=true"))
    with pytest.raises(
        CheckpointError, match=r"in_range.pt: its UAVs observe .*, True, 0.0\), not what the other goto"
    ):
        compare_checkpoints([coma, in_range], episodes=4, horizon=3, device=torch.device("cpu"))
    with pytest.raises(CheckpointError, match="coma.pt: model=mlp flies the 4 UAVs it was trained for .* not 6"):
        compare_checkpoints([coma], episodes=4, horizon=3, device=torch.device("cpu"), n_uav=6)
    older = torch.load(masac, weights_only=True)  # as saved before the critics read the UAV's own observation
    critic_in = older["policy"]["critics.weights.0"]
    older["policy"]["critics.weights.0"] = critic_in[..., : -env_settings(masac_cfg).obs_dim()]
    torch.save(older, tmp_path / "damaged.pt")
    with pytest.raises(
        CheckpointError,
        match=r"damaged.pt \(algorithm=masac, model=mlp\): part 'policy' \(policy "
        r"weights\) fails its checksum",
    ):
        compare_checkpoints([str(tmp_path / "damaged.pt")], episodes=4, horizon=3, device=torch.device("cpu"))
    del older["checksums"]  # written before checksums: its actor, unchanged, plays as the intact checkpoint's
    torch.save(older, tmp_path / "older.pt")
    old_rows, new_rows = (
        compare_checkpoints([str(tmp_path / name)], episodes=8, horizon=4, device=torch.device("cpu"))
        for name in ("older.pt", "masac.pt")
    )
    assert [r["return"] for r in old_rows] == [r["return"] for r in new_rows]
    actor_in = older["policy"]["actors.weights.0"]
    older["policy"]["actors.weights.0"] = actor_in[..., :-1]  # an actor this version does not build: named
    torch.save(older, tmp_path / "older.pt")
    with pytest.raises(
        CheckpointError,
        match=r"older.pt \(algorithm=masac, model=mlp: an environment policy; "
        r"mode=eval ckpt=, resume=auto .*\): "
        r"its weights do not fit what this run builds \(size mismatch "
        r"for actors",
    ):
        compare_checkpoints([str(tmp_path / "older.pt")], episodes=4, horizon=3, device=torch.device("cpu"))
