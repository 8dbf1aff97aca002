"""CBBA worked by hand, against the sequential greedy allocation written out pair by pair, per connected part of
the communication graph, on static scenes against the MILP, and on the environment (what it reads, what it flies,
what it counts)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_uav_env import CPU

from uavgnn.envs.cbba import Auction, CBBAPlanner, allocate, auction_of, scene_auction
from uavgnn.envs.policies import goto_action, nearest_target, run_episodes
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.evaluation.episodes import CBBA, compare_policies
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.metrics import reward
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.solvers import solve_milp


def sequential_greedy(value: torch.Tensor, slot_target: torch.Tensor, need: list[int]) -> list[int]:
    """Each UAV's target (-1 none) by the greedy allocation: UAV-slot pairs by value (equal: lower UAV, then lower
    slot), each taken if both are free; then the targets left with fewer winners than their need are closed to
    everyone and the greedy runs again, until none is left partly won."""
    n, s = value.shape
    allowed = set(range(s))
    while True:
        pairs = sorted((-float(value[u, k]), u, k) for u in range(n) for k in allowed if value[u, k] > 0)
        taken: dict[int, int] = {}
        for _, u, k in pairs:
            if u not in taken and k not in taken.values():
                taken[u] = k
        won = [0] * len(need)
        for k in taken.values():
            won[int(slot_target[k])] += 1
        partial = {t for t, w in enumerate(won) if 0 < w < need[t]}
        if not partial:
            return [int(slot_target[taken[u]]) if u in taken else -1 for u in range(n)]
        allowed -= {k for k in allowed if int(slot_target[k]) in partial}


def auction(
    target_value: torch.Tensor, need: torch.Tensor, links: list[list[int]] | None = None, pad: int = 0
) -> Auction:
    """The auction of targets worth ``target_value`` (E, N, M) per slot to each UAV, with needs (E, M); ``links``:
    whom each UAV hears (every other UAV when None), ``pad`` absent links more each."""
    e, n, m = target_value.shape
    need_max = int(need.max())
    slot_target, rank = torch.arange(m * need_max) // need_max, torch.arange(m * need_max) % need_max
    value = target_value[..., slot_target] * (rank < need[:, slot_target])[:, None]
    links = [[j for j in range(n) if j != i] for i in range(n)] if links is None else links
    k = max(len(heard) for heard in links) + pad
    heard = torch.tensor([h + [0] * (k - len(h)) for h in links], dtype=torch.long).expand(e, n, k)
    present = torch.tensor([[j < len(h) for j in range(k)] for h in links], dtype=torch.bool).expand(e, n, k)
    return Auction(value, slot_target, need, heard, present)


def test_two_uavs_one_target_the_higher_bid_wins_and_the_other_hovers() -> None:
    out = allocate(auction(torch.tensor([[[5.0], [3.0]]]), torch.tensor([[1]])), max_rounds=8)
    assert out.target.tolist() == [[0, -1]]
    # round 1: both bid, consensus gives UAV 0 the slot; round 2: nothing changes. Each round 2 messages.
    assert out.rounds.tolist() == [2] and out.messages.tolist() == [4]


def test_the_greedy_order_not_the_best_sum() -> None:
    """UAV 0 values target 0 most and takes it, UAV 1 gets target 1 - worth 6, where swapping would be worth 8.5:
    CBBA's guarantee is the greedy one (half the optimum), as the literature states."""
    values = torch.tensor([[[5.0, 4.0], [4.5, 1.0]]])
    assert allocate(auction(values, torch.tensor([[1, 1]])), 8).target.tolist() == [[0, 1]]


def test_a_target_only_partly_won_is_given_up_and_its_uav_goes_elsewhere() -> None:
    """Target 0 needs 2 and only UAV 0 reaches it; it wins one slot, the views settle, target 0 is given up and UAV
    0 outbids UAV 1 on target 1 (3 > 1)."""
    values = torch.tensor([[[5.0, 3.0], [0.0, 1.0]]])
    out = allocate(auction(values, torch.tensor([[2, 1]])), 16)
    assert out.target.tolist() == [[1, -1]]


def test_equal_bids_go_to_the_lower_numbered_uav() -> None:
    assert allocate(auction(torch.full((1, 3, 1), 2.0), torch.tensor([[1]])), 8).target.tolist() == [[0, -1, -1]]


@pytest.mark.parametrize("pad", [0, 1])  # 1: the links as lists, not known to be everyone
@pytest.mark.parametrize(("n", "m", "need_max", "reach"), [(3, 2, 2, 0.8), (6, 4, 3, 0.6), (10, 6, 3, 0.7)])
def test_with_every_link_the_auction_ends_where_the_sequential_greedy_does(
    n: int, m: int, need_max: int, reach: float, pad: int
) -> None:
    g = torch.Generator().manual_seed(n)
    need = torch.randint(1, need_max + 1, (64, m), generator=g)
    values = torch.rand(64, n, m, generator=g) * (torch.rand(64, n, m, generator=g) < reach)
    a = auction(values, need, pad=pad)
    out = allocate(a, 4 * n)
    for b in range(64):
        assert out.target[b].tolist() == sequential_greedy(a.value[b], a.slot_target, need[b].tolist())
        counts = torch.bincount(out.target[b][out.target[b] >= 0], minlength=m)
        assert ((counts == 0) | (counts == need[b])).all()  # every target full or empty: conflict-free
    assert (out.rounds < 4 * n).all()  # it ended by itself
    assert out.messages.tolist() == (out.rounds * n * (n - 1)).tolist()  # absent links carry nothing


def test_parts_that_do_not_hear_each_other_allocate_alone() -> None:
    """UAVs 0-2 hear each other (0 and 2 only through 1), UAVs 3-4 each other: each part ends where the greedy on its
    own UAVs does, and both parts may send UAVs to one target."""
    g = torch.Generator().manual_seed(1)
    values, need = torch.rand(32, 5, 3, generator=g), torch.randint(1, 3, (32, 3), generator=g)
    a = auction(values, need, links=[[1], [0, 2], [1], [4], [3]])
    out = allocate(a, 20)
    shared = False
    for b in range(32):
        left = sequential_greedy(a.value[b, :3], a.slot_target, need[b].tolist())
        right = sequential_greedy(a.value[b, 3:], a.slot_target, need[b].tolist())
        assert out.target[b].tolist() == left + right
        shared |= bool(set(left) & set(right) - {-1})
    assert shared  # the case the split exists for happened


def test_uavs_that_hear_nobody_each_take_what_they_value_most_and_a_cap_is_reported() -> None:
    """No links: each UAV alone wins its best slot (both the same target here, as two deaf bidders would); a
    chain 0-1-2 cut after one round has not settled and says so."""
    deaf = auction(torch.tensor([[[3.0, 1.0], [2.0, 1.0]]]), torch.tensor([[1, 1]]), links=[[], []])
    out = allocate(deaf, 8)
    assert out.target.tolist() == [[0, 0]] and out.messages.tolist() == [0] and not out.capped.any()
    chain = auction(torch.tensor([[[1.0], [2.0], [3.0]]]), torch.tensor([[1]]), links=[[1], [0, 2], [1]])
    assert allocate(chain, 1).capped.tolist() == [True]
    settled = allocate(chain, 16)
    assert settled.target.tolist() == [[-1, -1, 0]] and settled.capped.tolist() == [False]


def test_on_a_static_scene_cbba_is_the_greedy_by_slot_profit_and_at_most_the_milp() -> None:
    """The scene's problem as an auction (slot values ``w / d - lam * dist`` within range): its allocation is the
    sequential greedy one, every target full or empty, what its UAVs earn is the objective the MILP scores, and that
    is at most the MILP's proven optimum."""
    scenes = generate_scenes(SceneDistribution(), 12, 6, seed=5)
    a = scene_auction(scenes)
    out = allocate(a, 48)
    for b, scene in enumerate(scenes):
        assignment = out.target[b].numpy()
        need = scene.need.tolist() + [1] * (a.need.shape[1] - scene.n_target)
        assert assignment.tolist() == sequential_greedy(a.value[b], a.slot_target, need)
        counts = torch.bincount(out.target[b][out.target[b] >= 0], minlength=scene.n_target)
        assert ((counts == 0) | (counts == torch.as_tensor(scene.need))).all()
        gap = [float(((scene.uav_pos[u] - scene.target_pos[t]) ** 2).sum()) ** 0.5 for u, t in enumerate(assignment)]
        earned = sum(scene.value[t] / scene.need[t] - scene.lam * gap[u] for u, t in enumerate(assignment) if t >= 0)
        assert reward(scene, assignment) == pytest.approx(earned, rel=1e-9, abs=1e-9)
        assert reward(scene, assignment) <= solve_milp(scene).objective + 1e-9


def test_the_auction_reads_the_environment_as_the_planner_does() -> None:
    """Each UAV-slot value by hand: the target's value over its need less lam times the distance, where the UAV is
    live, reaches it, the target is open and visible and the slot within its need; the links are the observation's."""
    settings = EnvSettings(n_uav=5, horizon=10, action="goto", obs_targets=3, obs_uavs=2, comm_radius=0.8)
    env = UAVEnv(settings, SceneDistribution(), 4, CPU, seed=3)
    env.reset()
    env.energy[0, 1] = 0.0  # a UAV out of range bids on nothing
    a = auction_of(env)
    need_max = env.dist.need_max
    for b in range(env.n_envs):
        for u in range(env.n_uav):
            for t in range(env.n_target):
                d = float((env.pos[b, u] - env.target_pos[b, t]).norm())
                worth = float(env.value[b, t]) / int(env.need[b, t]) - env.dist.lam * d
                can = env.energy[b, u] > 0 and d <= env.energy[b, u] and env.visible()[b, t] and worth > 0
                for rank in range(need_max):
                    expected = worth if can and rank < env.need[b, t] else 0.0
                    assert float(a.value[b, u, t * need_max + rank]) == pytest.approx(expected, abs=1e-5)
    heard, present, _ = env.neighbours()
    assert torch.equal(a.heard, heard) and torch.equal(a.present, present & (env.energy > 0)[..., None])


def test_the_planner_flies_each_uav_at_the_target_it_won_and_counts_what_it_cost() -> None:
    settings = EnvSettings(n_uav=6, horizon=8, action="goto", obs_targets=3, obs_uavs=5)
    env = UAVEnv(settings, SceneDistribution(target_ratio=0.5), 16, CPU, seed=0)
    env.reset()
    planner = CBBAPlanner()
    allocation = allocate(auction_of(env), 24)
    assert torch.equal(planner(env), goto_action(env, allocation.target))
    scores = run_episodes(env, planner)
    assert scores.episode_return.shape == (16,)
    decisions = 16 * (1 + settings.horizon)  # the first call above, then one per step of every episode
    assert planner.decisions == decisions and planner.uav_decisions == decisions * 6
    costs = planner.costs()
    assert costs["messages_per_uav"] == pytest.approx(costs["rounds"] * 5)  # every UAV hears the 5 others
    assert 2 <= costs["rounds"] < 24 and float(planner.capped) == 0  # every auction settled by itself


def test_cbba_under_failures_allocates_no_fallen_uav() -> None:
    settings = dataclasses.replace(
        EnvSettings(n_uav=8, horizon=12, action="goto", obs_targets=4, obs_uavs=3), failures=1.0
    )
    env = UAVEnv(settings, SceneDistribution(), 32, CPU, seed=1)
    env.reset()
    planner = CBBAPlanner()
    fallen = 0
    for _ in range(settings.horizon - 1):
        down = env.down()
        target = allocate(auction_of(env), 32).target
        assert (target[down] == -1).all()
        fallen += int(down.sum())
        env.step(planner(env))
    assert fallen > 0  # failures happened


def test_every_table_counts_the_messages_of_the_methods_that_hear() -> None:
    """Each UAV hears its 2 nearest (no disruption): the policy and the decentralised planner receive 2 messages a
    decision in one round, CBBA 2 a round; the central planner sends none."""
    settings = EnvSettings(n_uav=6, horizon=6, action="goto", obs_targets=3, obs_uavs=2)
    rows, _ = compare_policies({"policy": nearest_target}, settings, SceneDistribution(), 8, CPU)
    by = {row["method"]: row for row in rows}
    for method in ("policy", "decentralised planner"):
        assert (by[method]["rounds"], by[method]["messages_per_uav"]) == (1.0, 2.0)
    assert by[CBBA]["rounds"] >= 2 and by[CBBA]["messages_per_uav"] == pytest.approx(2 * by[CBBA]["rounds"], abs=0.01)
    assert "rounds" not in by["scripted planner"] and "messages_per_uav" not in by["scripted planner"]
