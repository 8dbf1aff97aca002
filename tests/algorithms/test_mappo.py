"""MAPPO: GAE against the TD-error recursion, the batched loss against per-sample torch.distributions,
the value normaliser against the returns' moments, and algorithm=mappo in the shared loop (exact resume,
mode=eval on its checkpoint, the graph actor at other swarm sizes)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path

import pytest
import torch
from conftest import compose, resume_is_exact
from torch.distributions import Categorical, Normal

from uavgnn.algorithms.mappo import MAPPOAgents, MAPPOSettings, mappo_loss
from uavgnn.algorithms.mappo_rollouts import Rollouts, TaughtRollouts
from uavgnn.algorithms.registry import check_config
from uavgnn.algorithms.rl_math import gae
from uavgnn.infrastructure.errors import ConfigError


def gae_by_recursion(reward, done, value, gamma, lam):
    """GAE as written in the PPO paper: A_t = delta_t + gamma lambda (1 - done_t) A_{t+1}, one step at a time."""
    b, t, n = reward.shape
    advantage = torch.zeros_like(reward)
    for e in range(b):
        for i in range(n):
            running = 0.0
            for k in reversed(range(t)):
                live = 1.0 - float(done[e, k])
                next_value = float(value[e, k + 1, i]) if k + 1 < t else 0.0
                delta = float(reward[e, k, i]) + gamma * live * next_value - float(value[e, k, i])
                running = delta + gamma * lam * live * running
                advantage[e, k, i] = running
    return advantage


def test_gae_is_the_td_error_recursion_and_the_returns_are_advantage_plus_value() -> None:
    g = torch.Generator().manual_seed(0)
    reward, value = (
        torch.randn(3, 7, 2, generator=g, dtype=torch.float64),
        torch.randn(3, 7, 2, generator=g, dtype=torch.float64),
    )
    done = torch.zeros(3, 7, dtype=torch.float64)
    done[0, 3] = done[1, 6] = 1.0  # episode 2 never ends inside the window: no bootstrap past it
    advantage, returns = gae(reward, done, value, 0.9, 0.8)
    torch.testing.assert_close(advantage, gae_by_recursion(reward, done, value, 0.9, 0.8), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(returns, advantage + value, rtol=1e-12, atol=1e-12)


def test_gae_by_hand_on_two_steps() -> None:
    # r = (1, 2), V = (0.5, 1), ends at step 1, gamma 0.9, lambda 0.5:
    # delta_1 = 2 - 1 = 1; delta_0 = 1 + 0.9 * 1 - 0.5 = 1.4; A_0 = 1.4 + 0.45 * 1 = 1.85
    advantage, _ = gae(
        torch.tensor([[[1.0], [2.0]]]), torch.tensor([[0.0, 1.0]]), torch.tensor([[[0.5], [1.0]]]), 0.9, 0.5
    )
    torch.testing.assert_close(advantage[0, :, 0], torch.tensor([1.85, 1.0]))


def agents_for(continuous: bool, n: int = 3) -> MAPPOAgents:
    torch.manual_seed(0)
    agents = MAPPOAgents(MAPPOSettings(n, 6, 8, 2 if continuous else 5, continuous, 16, 2, 16, 2, 0.9)).double()
    with torch.no_grad():
        if continuous:
            agents.log_std.copy_(torch.tensor([-0.5, 0.3]))
        agents.return_moments.copy_(torch.tensor([0.5, 1.0, 4.0], dtype=torch.float64))  # mean 2, std 2
    return agents


def random_rollouts(agents: MAPPOAgents, b: int = 4, t: int = 5) -> Rollouts:
    s, g = agents.s, torch.Generator().manual_seed(1)
    n = s.n_agents
    avail = torch.rand(b, t, n, s.n_actions, generator=g) > 0.4
    avail[..., 0] = True
    obs = torch.randn(b, t, n, s.obs_dim, generator=g, dtype=torch.float64)
    if s.continuous:
        action = torch.randn(b, t, n, s.n_actions, generator=g, dtype=torch.float64)
    else:
        action = torch.multinomial(avail.double().view(-1, s.n_actions), 1, generator=g).view(b, t, n)
    with torch.no_grad():  # old log-probs near the current ones: some ratios inside the clip range, some outside
        old = agents.log_prob(obs, avail, action)[0] + 0.3 * torch.randn(b, t, n, generator=g, dtype=torch.float64)
    mask = torch.ones(b, t, dtype=torch.float64)
    mask[0, 3:] = 0.0
    rand = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731
    return Rollouts(
        obs,
        rand(b, t, s.state_dim),
        avail,
        action,
        rand(b, t, n),
        torch.zeros(b, t, dtype=torch.float64),
        mask,
        old,
        rand(b, t, n),
        rand(b, t, n),
        rand(b, t, n),
    )


def loss_per_sample(agents: MAPPOAgents, r: Rollouts, clip: float, entropy_coef: float) -> torch.Tensor:
    """The clipped objective and the normalised value loss, one (episode, step, agent) at a time, with
    torch.distributions for the log-probabilities and entropies."""
    s = agents.s
    live = [
        (e, k, i) for e in range(len(r)) for k in range(r.obs.shape[1]) for i in range(s.n_agents) if r.mask[e, k] > 0
    ]
    adv = torch.stack([r.advantage[e, k, i] for e, k, i in live])
    adv = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8)
    mean, std = 2.0, 2.0  # return_moments above
    actor, critic = [], []
    for (e, k, i), a in zip(live, adv):
        ident = torch.eye(s.n_agents, dtype=torch.float64)[i]
        out = agents.actor(torch.cat([r.obs[e, k, i], ident]))
        if s.continuous:
            dist = Normal(out, agents.log_std.exp())
            logp, entropy = dist.log_prob(r.action[e, k, i]).sum(), dist.entropy().sum()
        else:
            dist = Categorical(logits=out.masked_fill(~r.avail[e, k, i], -math.inf))
            logp, entropy = dist.log_prob(r.action[e, k, i]), dist.entropy()
        ratio = torch.exp(logp - r.logp[e, k, i])
        actor.append(-(torch.min(ratio * a, torch.clamp(ratio, 1 - clip, 1 + clip) * a) + entropy_coef * entropy))
        v = agents.critic(torch.cat([r.state[e, k], r.obs[e, k, i], ident]))[0]
        critic.append((v - (r.returns[e, k, i] - mean) / std) ** 2)
    return torch.stack(actor).mean() + torch.stack(critic).mean()


@pytest.mark.parametrize("continuous", [True, False])
def test_the_batched_loss_and_gradients_equal_the_per_sample_reference(continuous: bool) -> None:
    agents = agents_for(continuous)
    r = random_rollouts(agents)
    batched, stats = mappo_loss(agents, r, 0.2, 0.01)
    reference = loss_per_sample(agents, r, 0.2, 0.01)
    torch.testing.assert_close(batched, reference, rtol=1e-10, atol=1e-10)
    params = list(agents.parameters())
    for a, b in zip(torch.autograd.grad(batched, params), torch.autograd.grad(reference, params)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert 0 < stats["clip_fraction"] < 1  # the case has clipped and unclipped samples


def test_a_clipped_sample_gives_the_actor_no_gradient() -> None:
    agents = agents_for(False, n=1)
    r = random_rollouts(agents, b=2, t=1)
    r.mask.fill_(1.0)
    r.advantage = torch.tensor([[[1.0]], [[-1.0]]], dtype=torch.float64)  # normalised: +1 and -1
    with torch.no_grad():
        r.logp = agents.log_prob(r.obs, r.avail, r.action)[0] - 0.5  # ratio e^0.5 = 1.65 > 1.2 for both
    loss, _ = mappo_loss(agents, Rollouts(*[x[:1] for x in vars(r).values()]), 0.2, 0.0)  # A > 0, clipped: flat
    grads = torch.autograd.grad(loss, list(agents.actor.parameters()), allow_unused=True)
    assert all(g is None or g.abs().max() == 0 for g in grads)
    loss, _ = mappo_loss(agents, r, 0.2, 0.0)  # with A < 0 the unclipped term is the minimum: it has a gradient
    assert sum(g.abs().sum() for g in torch.autograd.grad(loss, list(agents.actor.parameters()))) > 0


def test_the_value_normaliser_tracks_the_returns_moving_moments() -> None:
    agents = MAPPOAgents(MAPPOSettings(2, 6, 8, 2, True, 8, 1, 8, 1, 0.5))
    assert [float(x) for x in agents.return_scale()] == [0.0, 1.0]  # before any data: no scaling
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    first = torch.tensor([[[1.0, 3.0], [1.0, 3.0], [100.0, 100.0]]])  # the masked step does not count
    agents.observe_returns(first, mask)
    mean, std = agents.return_scale()
    assert (float(mean), float(std)) == pytest.approx((2.0, 1.0))
    agents.observe_returns(torch.full((1, 3, 2), 5.0), mask)
    # weights (1 - d) d = 0.25 and (1 - d) = 0.5, normalised: 1/3 and 2/3
    mean, std = agents.return_scale()
    expect_mean = 2.0 / 3 + 5.0 * 2 / 3
    expect_var = (5.0 / 3 + 25.0 * 2 / 3) - expect_mean**2  # E[x^2]: (1 + 9) / 2 = 5 for the first
    assert (float(mean), float(std)) == pytest.approx((expect_mean, math.sqrt(expect_var)))


def compose_mappo(*overrides: str):
    """MAPPO at a test's budget: small networks, two minibatches, a row every 4 steps, a checkpoint every 6."""
    return compose(
        "algorithm=mappo",
        "logger=jsonl",
        "hardware.batch_size=4",
        "algorithm.minibatches=2",
        "algorithm.data_passes=2",
        "env.val_episodes=8",
        "model.hidden=16",
        "algorithm.critic_hidden=16",
        "train.log_every=4",
        "train.eval_every=6",
        "train.ckpt_every=6",
        *overrides,
    )


def test_a_resumed_mappo_run_repeats_the_uninterrupted_one_exactly(tmp_path) -> None:
    """Stopped mid-collection (step 6 of rounds of 4): the rollouts, environments and normaliser come back."""
    a, b = resume_is_exact(compose_mappo, tmp_path, half=6)
    assert float(a["model"]["return_moments"][0]) > 0  # the normaliser saw returns


@pytest.mark.parametrize(
    "override, message",
    [
        ("hardware.batch_size=auto", "give a number, not auto"),
        ("model=tcn", "model=tcn with algorithm=mappo: its networks are model=mlp or a TransformerGNN size"),
        ("algorithm.critic=graph", "algorithm.critic=graph with model=mlp: a graph critic reads observation graphs"),
        ("algorithm.critic=global", "algorithm.critic='global': expected state or graph"),
        (
            "algorithm.teacher=oracle",
            "algorithm.teacher='oracle': expected none, planner, planner_home or planner_home_at_rest",
        ),
        ("algorithm.teacher=planner", "algorithm.teacher=planner with env.action=continuous: the planner's actions"),
        (
            "env=goto algorithm.teacher=planner_home",
            "algorithm.teacher=planner_home without env.goto_home: its idle UAVs fly home",
        ),
        (
            "env=goto algorithm.teacher=planner_home_at_rest",
            "algorithm.teacher=planner_home_at_rest without env.goto_home: its idle UAVs fly home",
        ),
        (
            "env=goto algorithm.teacher=planner algorithm.teacher_motion_weight=0.25",
            r"algorithm.teacher_motion_weight=0.25 with algorithm.teacher=planner and env.target_speed=0.0: it tells",
        ),
        (
            "env=goto env.target_speed=0.2 algorithm.teacher_motion_weight=0.25",
            r"algorithm.teacher_motion_weight=0.25 with algorithm.teacher=none .* it needs a teacher and moving",
        ),
        ("algorithm.teacher_motion_weight=1.5", r"algorithm.teacher_motion_weight=1.5 must be in \[0, 1\]"),
        ("env.obs_links=true", r"env.obs_links=true with model=mlp: a link \(seen UAV -> seen target\) reaches"),
        ("model=tiny env.obs_links=true", r"env.obs_links=true with model=tiny model.layers=1: .* model.layers>=2"),
        ("env.obs_motion_weight=0.25", r"env.obs_motion_weight=0.25 with env.target_speed=0.0: it reckons seen"),
        ("env.obs_motion_weight=2", r"env.obs_motion_weight=2.0 must be in \[0, 1\]"),
        ("env=goto algorithm.target_scores=true", r"algorithm.target_scores=true with model=mlp and env.action=goto"),
        ("model=tiny algorithm.target_scores=true", r"with model=tiny and env.action=continuous: it scores the graph"),
    ],
)
def test_mappo_settings_are_checked_before_any_work(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_config(compose_mappo(*override.split()))


def test_the_teacher_term_is_the_weighted_log_likelihood_of_the_planners_feasible_actions_per_sample() -> None:
    """``teacher=planner`` adds -w log pi(u* | o) over every live (episode, step, agent), u* feasible, each episode
    with its own weight w: the loss minus the plain rollouts' loss equals that sum, one sample at a time."""
    agents = agents_for(continuous=False)
    r = random_rollouts(agents)
    g = torch.Generator().manual_seed(5)
    teacher = torch.randint(0, agents.s.n_actions, r.action.shape, generator=g)
    weight = torch.tensor([1.0, 0.5, 0.0, 2.0], dtype=torch.float64)
    taught = TaughtRollouts(*(getattr(r, f) for f in r.__dataclass_fields__), teacher, weight)
    extra = mappo_loss(agents, taught, 0.2, 0.01)[0] - mappo_loss(agents, r, 0.2, 0.01)[0]
    terms = []
    for e, k, i in itertools.product(range(len(r)), range(r.obs.shape[1]), range(agents.s.n_agents)):
        if r.mask[e, k] > 0:
            u = int(teacher[e, k, i])
            out = agents.actor(torch.cat([r.obs[e, k, i], torch.eye(agents.s.n_agents, dtype=torch.float64)[i]]))
            logp = Categorical(logits=out.masked_fill(~r.avail[e, k, i], -math.inf)).log_prob(torch.tensor(u))
            terms.append(-weight[e] * logp if r.avail[e, k, i, u] else torch.zeros((), dtype=torch.float64))
    torch.testing.assert_close(extra, torch.stack(terms).mean())


def test_a_resumed_mappo_run_taught_by_the_planner_repeats_the_uninterrupted_one(tmp_path) -> None:
    """The teacher's actions and weights are part of the saved collection (with the home action: the UAVs' starts
    are part of the saved environments)."""
    taught = ("env=goto", "env.goto_home=true", "algorithm.teacher=planner", "algorithm.teacher_updates=8")
    resume_is_exact(lambda *o: compose_mappo(*taught, *o), tmp_path, half=6)


def test_where_the_planner_hovers_going_home_agrees_with_it() -> None:
    """``env.goto_home``: the planner has no home action, so its hover teaches nothing against going home; every
    other action of the planner is taught as it is (and everything without the home action)."""
    from uavgnn.algorithms.mappo_rollouts import Teacher, planner_teaching
    from uavgnn.envs.policies import scripted_planner
    from uavgnn.envs.settings import EnvSettings
    from uavgnn.envs.uav_env import UAVEnv
    from uavgnn.problem.scenes import SceneDistribution

    teacher = Teacher(1.0, 10)
    settings = EnvSettings(n_uav=8, action="goto", goto_home=True)
    env = UAVEnv(settings, SceneDistribution(), 16, torch.device("cpu"), seed=0)
    planner, home = scripted_planner(env), settings.obs_targets + 1
    action = torch.randint(0, settings.action_dim(), planner.shape, generator=torch.Generator().manual_seed(0))
    taught = planner_teaching(env, action, teacher)
    for e, n in itertools.product(range(16), range(8)):
        hovers_home = planner[e, n] == 0 and action[e, n] == home
        assert taught[e, n] == (home if hovers_home else planner[e, n])
    assert ((planner == 0) & (action == home)).any() and ((planner == 0) & (action != home)).any()
    assert (planner > 0).any()
    # teacher=planner_home: idle UAVs with range fly home
    idle_home = planner_teaching(env, action, Teacher(1.0, 10, idle_home=True))
    assert torch.equal(idle_home, torch.where((planner == 0) & (env.energy > 0), home, planner))
    plain = UAVEnv(dataclasses.replace(settings, goto_home=False), SceneDistribution(), 16, torch.device("cpu"), seed=0)
    assert torch.equal(
        planner_teaching(plain, action.clamp(max=settings.obs_targets), teacher), scripted_planner(plain)
    )


def test_a_teacher_told_the_targets_motion_teaches_the_planner_told_it() -> None:
    """``algorithm.teacher_motion_weight``: among moving targets the taught actions are those of the planner told
    their motion (which differ from the plain planner's there), with its idle UAVs home where targets rest when the
    teacher says so; where every target rests they are the plain planner's."""
    from uavgnn.algorithms.mappo_rollouts import Teacher, planner_teaching
    from uavgnn.envs.policies import planner_going_home, scripted_planner
    from uavgnn.envs.settings import EnvSettings
    from uavgnn.envs.uav_env import UAVEnv
    from uavgnn.problem.scenes import SceneDistribution

    settings = EnvSettings(n_uav=8, action="goto", goto_home=True, target_speed=0.26, disrupted_share=0.5)
    env = UAVEnv(settings, SceneDistribution(), 64, torch.device("cpu"), seed=0)
    for _ in range(3):
        env.step(scripted_planner(env))
    action = torch.zeros(64, 8, dtype=torch.long)  # hovering: agrees with nothing but the planner's hover
    told = scripted_planner(env, 0.25)
    assert torch.equal(planner_teaching(env, action, Teacher(1.0, 10, motion_weight=0.25)), told)
    assert not torch.equal(told, scripted_planner(env))
    home_at_rest = planner_teaching(env, action, Teacher(1.0, 10, idle_home=True, at_rest=True, motion_weight=0.25))
    assert torch.equal(home_at_rest, planner_going_home(env, True, lambda e: scripted_planner(e, 0.25)))
    rest = env.target_vel.norm(dim=-1).amax(-1) == 0  # the calm episodes
    assert rest.any() and torch.equal(told[rest], scripted_planner(env)[rest])


def test_a_run_across_swarm_sizes_flies_each_drawn_size_and_resumes_exactly(tmp_path) -> None:
    """``env.train_sizes``: each collection one size, drawn from (seed, step), as many UAVs as n_uav's; the
    environments of every size flown come back from ``last.pt``."""
    graph = ("model=tiny", "model.hidden=16", "env=goto", "algorithm.critic=graph", "env.train_sizes=[4,8]")
    a, _ = resume_is_exact(lambda *o: compose_mappo(*graph, *o), tmp_path, half=6)
    flown = {int(n) for n in a["data"]["swarm_envs"]}
    assert flown == {8}  # 4 is env.n_uav's, saved as "env"
    saved = a["data"]["swarm_envs"][8]["tensors"]["pos"]
    assert saved.shape == (4, 8, 2)  # 2 minibatches of 4 episodes of 4 UAVs: 4 episodes of 8 UAVs


@pytest.mark.parametrize(
    "overrides",
    [("env.train_sizes=[4,8]",), ("model=tiny", "env.train_sizes=[4,8]"), ("algorithm=coma", "env.train_sizes=[4]")],
)
def test_training_across_swarm_sizes_takes_a_graph_actor_and_critic(overrides) -> None:
    with pytest.raises(ConfigError, match=r"training across swarm sizes takes .*algorithm=mappo with a TransformerGNN"):
        check_config(compose_mappo(*overrides))


def test_the_graph_critic_values_each_uav_from_its_graph_and_the_swarms_mean_at_any_size() -> None:
    """``GraphCritic`` batched over episodes and UAVs equals the per-UAV computation by hand, with the same
    weights at 3 and 9 UAVs, and permuting the UAVs permutes their values."""
    from uavgnn.models.graph_actor import GraphCritic
    from uavgnn.problem.observation import SEEN_TARGET_FEATURES, SELF_FEATURES, ObservationLayout

    torch.manual_seed(0)
    layout = ObservationLayout(obs_targets=3, obs_uavs=2)
    critic = GraphCritic(layout, hidden=16, heads=2, layers=1, ffn_mult=2).double().eval()
    obs_dim = layout.obs_dim
    for n in (3, 9):
        obs = torch.randn(2, n, obs_dim, dtype=torch.float64)
        obs[..., SELF_FEATURES + SEEN_TARGET_FEATURES - 1] = 1.0  # the first target seen, the others as drawn
        values = critic(obs)
        assert values.shape == (2, n)
        for e in range(2):
            h = torch.stack([critic.embed(obs[e, i][None])[0] for i in range(n)])  # one UAV at a time
            by_hand = critic.head(torch.cat([h, h.mean(0, keepdim=True).expand_as(h)], -1)).squeeze(-1)
            torch.testing.assert_close(values[e], by_hand)
        order = torch.randperm(n)
        torch.testing.assert_close(critic(obs[:, order]), values[:, order])


def test_a_graph_actor_trained_at_4_uavs_is_evaluated_at_12(tmp_path: Path) -> None:
    """goto actions, the graph actor and the graph critic: trained in the loop, then mode=eval at another swarm
    size."""
    from uavgnn.algorithms.env_policy import compare_checkpoints
    from uavgnn.modes.evaluate import run_eval
    from uavgnn.modes.train import run_train

    run = tmp_path / "run"
    overrides = ("model=tiny", "env=goto", "algorithm.critic=graph", "train.steps=4", "train.eval_every=4")
    run_train(compose_mappo(*overrides, "train.ckpt_every=4"), run)
    summary = json.loads((run / "summary.json").read_text())
    methods = ["mappo", "scripted planner", "decentralised planner", "CBBA", "nearest target", "random"]
    assert [r["method"] for r in summary["test"]] == methods
    out = tmp_path / "eval"
    out.mkdir()
    overrides = ("eval.episodes=4", "eval.scales=[12]", "eval.disruption_sets=[failures]")
    run_eval(compose_mappo("mode=eval", f"ckpt={run / 'best.pt'}", *overrides), out)
    report = json.loads((out / "eval.json").read_text())
    sizes = [(row["n_uav"], row["test_set"], row["method"]) for row in report["rows"]]
    assert sizes == [(n, t, m) for n in (4, 12) for t in ("nominal", "failures") for m in methods]
    assert (out / "test_sets.png").stat().st_size > 0
    rows = compare_checkpoints([str(run / "best.pt")], episodes=4, horizon=14, device=torch.device("cpu"), n_uav=12)
    first_at_12 = report["rows"][2 * len(methods)]  # after 4 UAVs' two sets
    assert rows[0]["return"] == first_at_12["return"]  # the same 12-UAV test episodes, the same policy
