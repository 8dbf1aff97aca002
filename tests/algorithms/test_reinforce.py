"""REINFORCE fine-tuning: rewards from the batch's tensors, the policy-gradient step, the algorithm option."""

import numpy as np
import pytest
import torch
from conftest import run_cli

from uavgnn.algorithms.reinforce import advantages, policy_samples, reinforce_loss, rollout_noise, rollout_rewards
from uavgnn.data.store import GraphStore
from uavgnn.inference.decoders import split_assignments
from uavgnn.models.choices import choice_log_probs, policy_entropy
from uavgnn.problem.metrics import IDLE, reward
from uavgnn.solvers import solve_milp


@pytest.fixture(scope="module")
def store(labelled_store) -> GraphStore:
    return labelled_store


def choice_of(batch, assignments: list[np.ndarray]) -> torch.Tensor:
    """Per-node target node (-1 idle) of per-scene assignments: the decoders' format."""
    choice = torch.full((batch.num_nodes,), IDLE, dtype=torch.long)
    for g, a in enumerate(assignments):
        start, n_uav = int(batch.ptr[g]), int(batch.n_uav[g])
        a = torch.as_tensor(a)
        choice[start : start + n_uav] = torch.where(a >= 0, a + start + n_uav, a)
    return choice


def test_rollout_rewards_equal_the_metric_on_milp_random_and_partial_assignments(store) -> None:
    batch = store.gather(torch.arange(len(store)))
    keep = batch.cand_rank < 16
    scenes = store.scenes()
    rng = np.random.default_rng(0)
    milp = [solve_milp(s).assignment for s in scenes]
    # random candidate choices (over-assigned and partial targets included) and all idle
    cand_uav, cand_target = batch.cand_index[0, keep], batch.cand_index[1, keep]
    pick = torch.full((batch.num_nodes,), IDLE, dtype=torch.long)
    for uav in torch.unique(cand_uav):
        options = cand_target[cand_uav == uav]
        if rng.random() < 0.7:
            pick[uav] = options[rng.integers(len(options))]
    rows = [choice_of(batch, milp), pick, torch.full((batch.num_nodes,), IDLE, dtype=torch.long)]
    got, total_value = rollout_rewards(batch, keep, torch.stack(rows))
    for s, choice in enumerate(rows):
        expected = [reward(scene, a) for scene, a in zip(scenes, split_assignments(batch, choice))]
        np.testing.assert_allclose(got[s].numpy(), expected, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(total_value.numpy(), [scene.value.sum() for scene in scenes], rtol=1e-5)
    np.testing.assert_allclose(got[0].numpy(), store.objective.numpy(), rtol=1e-5, atol=1e-4)  # the optimum


def test_rollouts_are_exact_samples_of_each_uavs_choice_distribution(store) -> None:
    """Unbiased REINFORCE needs rollouts drawn from the policy itself: empirical choice frequencies over
    many rollouts match each UAV's softmax over idle and its candidates."""
    batch = store.gather(torch.arange(3))
    keep = batch.cand_rank < 4
    gen = torch.Generator().manual_seed(1)
    cand_uav, cand_target = batch.cand_index[0, keep], batch.cand_index[1, keep]
    cand_logp, idle_logp = choice_log_probs(
        torch.randn(int(keep.sum()), generator=gen), torch.randn(batch.num_nodes, generator=gen), cand_uav
    )
    draws = 20_000
    choice = policy_samples(
        batch,
        cand_logp,
        idle_logp,
        keep,
        draws,
        rollout_noise(torch.Generator().manual_seed(2), draws, len(cand_uav), batch.num_nodes, cand_uav.device),
    )
    picked = (choice[:, cand_uav] == cand_target).float().mean(0)  # frequency of each candidate edge
    idle = (choice < 0).float().mean(0)
    uav = batch.node_type == 0
    # 4 standard errors of a frequency near 1/2 over 20,000 draws: 0.014
    torch.testing.assert_close(picked, cand_logp.exp(), rtol=0, atol=0.014)
    torch.testing.assert_close(idle[uav], idle_logp.exp()[uav], rtol=0, atol=0.014)


def test_advantages_against_the_greedy_decode_or_the_other_samples_by_hand() -> None:
    reward = torch.tensor([[1.0, 5.0], [2.0, 5.0], [4.0, 8.0], [6.0, 2.0]])  # row 0: greedy, then 3 samples; 2 scenes
    torch.testing.assert_close(advantages(reward, "greedy"), torch.tensor([[1.0, 0.0], [3.0, 3.0], [5.0, -3.0]]))
    # each sample against the mean of the two others: 2 - (4 + 6) / 2 = -3, ...
    expected = torch.tensor([[-3.0, 0.0], [0.0, 4.5], [3.0, -4.5]])
    torch.testing.assert_close(advantages(reward[1:], "mean"), expected)  # no greedy row: all three sampled
    with pytest.raises(ValueError, match="baseline=mean needs algorithm.samples >= 3"):
        advantages(reward[1:2], "mean")


@pytest.mark.parametrize("baseline", ["greedy", "mean"])
def test_steps_raise_the_expected_reward_of_the_policy(store, baseline) -> None:
    """What the estimator promises: gradient steps on the REINFORCE loss alone raise E[J] under the policy
    (measured on fresh samples). The logits are free parameters, so the policy follows the gradient exactly."""
    batch = store.gather(torch.arange(len(store)))
    keep = batch.cand_rank < 8
    gen = torch.Generator().manual_seed(0)
    cand_logit = torch.nn.Parameter(torch.randn(int(keep.sum()), generator=gen))
    idle_logit = torch.nn.Parameter(torch.randn(batch.num_nodes, generator=gen))

    class FreeLogits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cand, self.idle = cand_logit, idle_logit

        def forward(self, *args):
            return self.cand, self.idle

    policy = FreeLogits()
    full = batch.clone()  # candidates beyond rank 8 are dropped by message_edges, as in training
    full.k = 8
    full.cand_rank = torch.where(keep, full.cand_rank, torch.full_like(full.cand_rank, 99))

    def expected_reward() -> float:
        with torch.no_grad():
            cand_logp, idle_logp = choice_log_probs(cand_logit, idle_logit, batch.cand_index[0, keep])
            noise = rollout_noise(torch.Generator().manual_seed(99), 512, len(cand_logp), batch.num_nodes, None)
            choice = policy_samples(batch, cand_logp, idle_logp, keep, 512, noise)
            return float(rollout_rewards(batch, keep, choice)[0].sum(1).mean())

    optimizer = torch.optim.Adam(policy.parameters(), lr=0.1)
    before = expected_reward()
    for step in range(30):
        loss, stats, n = reinforce_loss(
            policy, full, samples=16, draws=torch.Generator().manual_seed(step), baseline=baseline
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        assert n == int((batch.node_type == 0).sum())
        assert 0 <= stats["better"] <= 1 if baseline == "greedy" else stats["sample_reward"] <= 1  # J <= the value
    after = expected_reward()
    assert before + 0.1 * abs(before) < after <= float(store.objective.sum()) + 1e-3  # measured: 184 -> 229


def test_entropy_bonus_by_hand(store) -> None:
    """UAV 0 picks idle or one of two targets with 1/3 each (ln 3 nats), UAV 1 has no candidate (0), UAV 2 idle
    or its one target at 1/2 (ln 2); node 3 is a target. The bonus moves the loss by -coef x that entropy."""
    third, half = torch.tensor(1 / 3).log(), torch.tensor(0.5).log()
    entropy = policy_entropy(
        torch.stack([third, third, half]),
        torch.stack([third, torch.tensor(0.0), half, half]),
        torch.tensor([0, 0, 2]),
        torch.tensor([True, True, True, False]),
    )
    assert float(entropy) == pytest.approx((np.log(3) + np.log(2)) / 3)
    batch = store.gather(torch.arange(4))
    batch.k = 8  # the candidate budget the step runs at
    model = FreeLogitsOf(batch)
    plain, stats, _ = reinforce_loss(model, batch, samples=4, draws=torch.Generator().manual_seed(1))
    bonus, _, _ = reinforce_loss(model, batch, samples=4, draws=torch.Generator().manual_seed(1), entropy_coef=0.5)
    assert float(bonus.detach()) == pytest.approx(float(plain.detach()) - 0.5 * float(stats["entropy"]), abs=1e-6)
    assert 0 < float(stats["entropy"]) < np.log(9)  # at most idle + 8 candidates, uniform
    # temperature 1/2 samples from pi^2 renormalised = the softmax of doubled logits: its entropy is logged
    _, sharp, _ = reinforce_loss(model, batch, samples=4, draws=torch.Generator().manual_seed(1), temperature=0.5)
    keep = batch.cand_rank < 8
    cand_uav = batch.cand_index[0, keep]
    doubled = choice_log_probs(2 * model.cand[: int(keep.sum())], 2 * model.idle, cand_uav)
    want = policy_entropy(*doubled, cand_uav, batch.node_type == 0).detach()
    assert float(sharp["entropy"]) == pytest.approx(float(want), rel=1e-5) and want < stats["entropy"]


def test_the_sync_free_greedy_baseline_gives_the_loop_decoders_loss_and_gradients(store) -> None:
    """``optim.sync_free``: the greedy rollout in fixed-shape rounds; converged, the step is the same step."""
    batch = store.gather(torch.arange(8))
    batch.k = 8
    model = FreeLogitsOf(batch)
    results = []
    for rounds in (None, 48, 2):
        model.zero_grad()
        loss, stats, _ = reinforce_loss(
            model, batch, samples=4, draws=torch.Generator().manual_seed(1), baseline="greedy", greedy_rounds=rounds
        )
        loss.backward()
        results.append((loss.detach(), stats, model.cand.grad.clone()))
    (loop, loop_stats, loop_grad), (fixed, fixed_stats, fixed_grad), (short, short_stats, _) = results
    assert "greedy_converged" not in loop_stats and bool(fixed_stats["greedy_converged"])
    assert torch.equal(loop, fixed) and torch.equal(loop_grad, fixed_grad)
    assert not bool(short_stats["greedy_converged"])  # 2 rounds cannot settle 8 scenes' contests: it says so
    assert float(short_stats["greedy_reward"]) < float(loop_stats["greedy_reward"])


class FreeLogitsOf(torch.nn.Module):
    """A policy whose candidate and idle logits are free parameters (random, seeded) for one batch."""

    def __init__(self, batch) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.cand = torch.nn.Parameter(torch.randn(batch.cand_index.shape[1], generator=gen))
        self.idle = torch.nn.Parameter(torch.randn(batch.num_nodes, generator=gen))

    def forward(self, *args):
        return self.cand[: args[4].shape[1]], self.idle


def test_reinforce_needs_a_sample_beyond_the_greedy_rollout(store) -> None:
    batch = store.gather(torch.arange(2))
    batch.k = 8
    model = torch.nn.Linear(1, 1)
    with pytest.raises(ValueError, match="algorithm.samples=1"):
        reinforce_loss(model, batch, samples=1)


@pytest.mark.heavy  # trains a model first; config validation of init_from runs by default
def test_init_from_a_missing_checkpoint_or_another_architecture_fails_naming_it(tmp_path) -> None:
    run_cli("experiment=debug", "logger=jsonl", "model=tiny", f"hydra.run.dir={tmp_path / 'a'}", cwd=tmp_path)
    out = run_cli(
        "experiment=debug",
        "logger=jsonl",
        "model=small",
        "algorithm=reinforce",
        f"algorithm.init_from={tmp_path / 'a' / 'best.pt'}",
        f"hydra.run.dir={tmp_path / 'b'}",
        cwd=tmp_path,
        check=False,
    )
    assert out.returncode != 0 and "algorithm.init_from" in out.stderr and "model.hidden" in out.stderr
    missing = run_cli(
        "experiment=debug",
        "algorithm=reinforce",
        f"algorithm.init_from={tmp_path / 'nope.pt'}",
        f"hydra.run.dir={tmp_path / 'c'}",
        cwd=tmp_path,
        check=False,
    )
    assert missing.returncode != 0 and f"algorithm.init_from={tmp_path / 'nope.pt'}: no checkpoint" in missing.stderr


def test_a_missing_init_from_checkpoint_is_refused_before_any_work(tmp_path) -> None:
    from conftest import compose

    from uavgnn.algorithms.registry import check_config
    from uavgnn.infrastructure.errors import ConfigError

    cfg = compose("algorithm=reinforce", f"algorithm.init_from={tmp_path / 'nope.pt'}")
    with pytest.raises(ConfigError, match="nope.pt: no checkpoint there"):
        check_config(cfg)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["algorithm.samples=2"], "algorithm.samples=2 must be >= 3 with algorithm.baseline=mean"),
        (
            ["algorithm.samples=1", "algorithm.baseline=greedy"],
            "algorithm.samples=1 must be >= 2 with algorithm.baseline=greedy",
        ),
    ],
)
def test_too_few_rollouts_for_the_baseline_are_refused_before_any_work(overrides, message) -> None:
    """samples - 1 rollouts are drawn: the others' mean needs two of them, the greedy rollout one."""
    from conftest import compose

    from uavgnn.algorithms.registry import check_config
    from uavgnn.infrastructure.errors import ConfigError

    cfg = compose("algorithm=reinforce", *overrides)
    with pytest.raises(ConfigError, match=message):
        check_config(cfg)
