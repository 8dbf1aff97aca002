"""MASAC: the batched update equals the per-agent loops of reference/002; replay sampling; exact resume."""

from __future__ import annotations

import pytest
import torch
from conftest import compose_masac, straight_and_resumed

from uavgnn.algorithms.masac import MASACAgents, MASACSettings, masac_loss
from uavgnn.algorithms.masac_naive import NaiveMASAC
from uavgnn.algorithms.registry import make_algorithm, make_model
from uavgnn.envs.replay import ReplayBuffer, SumTree, Transitions
from uavgnn.loggers import MetricLogger
from uavgnn.training.trainer import train


def random_batch(n: int, obs: int, state: int, b: int, dtype: torch.dtype) -> Transitions:
    g = torch.Generator().manual_seed(1)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=dtype)

    return Transitions(
        r(b, n, obs),
        r(b, state),
        torch.rand(b, n, 2, generator=g, dtype=dtype) * 2 - 1,
        r(b, n),
        r(b, n, obs),
        r(b, state),
        (torch.rand(b, generator=g) < 0.3).to(dtype),
        torch.rand(b, generator=g, dtype=dtype),
        torch.arange(b),
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_batched_update_has_the_losses_and_gradients_of_the_per_agent_loops(dtype) -> None:
    torch.manual_seed(0)
    n, obs, state, b = 3, 7, 11, 32
    agents = MASACAgents(MASACSettings(n, obs, state, 2, 32, 2, 32, 2, 0.95, 0.2)).to(dtype)
    with torch.no_grad():  # targets that differ from the critics, as they do after the first update
        for target in agents.targets():
            target.add_(0.05 * torch.randn_like(target))
    batch = random_batch(n, obs, state, b, dtype)
    noise, next_noise = torch.randn(2, n, b, 2, dtype=dtype).unbind(0)
    naive = NaiveMASAC(agents)
    loss, stats, _ = masac_loss(agents, batch, noise, next_noise)
    loss.backward()
    totals = naive.update(batch, noise, next_noise, apply=False)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(stats["critic_loss"].item(), totals["critic_loss"], **tol)
    torch.testing.assert_close(stats["actor_loss"].item(), totals["actor_loss"], **tol)
    for stack, modules in ((agents.actors, naive.actors), (agents.critics, naive.critics)):
        for k, name in enumerate(stack.names):
            for i, module in enumerate(modules):
                torch.testing.assert_close(stack.weights[k].grad[i], module.get_parameter(name).grad, **tol)
    torch.testing.assert_close(agents.log_alpha.grad, torch.stack([a.grad for a in naive.log_alpha]), **tol)


def test_acting_samples_the_policy_the_loss_scores() -> None:
    """``act`` skips the log-probability, not the sample: the actions of ``policy`` for the same noise, and its
    deterministic tanh(mean) without a generator."""
    agents, obs = MASACAgents(MASACSettings(3, 10, 20, 2, 16, 2, 16, 2, 0.95, 0.2)), torch.randn(5, 3, 10)
    acted = agents.act(obs, None, torch.Generator().manual_seed(1))
    noise = torch.randn((3, 5, 2), generator=torch.Generator().manual_seed(1))
    assert torch.equal(acted, agents.policy(obs.transpose(0, 1), noise)[0].transpose(0, 1))
    assert torch.equal(agents.act(obs, None, None), agents.policy(obs.transpose(0, 1), None)[0].transpose(0, 1))


def test_polyak_averaging_moves_every_target_by_tau() -> None:
    agents = MASACAgents(MASACSettings(2, 5, 6, 2, 8, 1, 8, 1, 0.9, 0.2))
    before = [t.clone() for t in agents.targets()]
    with torch.no_grad():
        for w in agents.critics.weights:
            w.add_(1.0)
    agents.update_targets(0.1)
    for old, new, w in zip(before, agents.targets(), agents.critics.weights):
        torch.testing.assert_close(new, 0.9 * old + 0.1 * w)


def test_sum_tree_finds_the_leaf_of_every_prefix_mass_like_a_cumulative_sum() -> None:
    g = torch.Generator().manual_seed(0)
    tree = SumTree(37, torch.device("cpu"))
    priority = torch.rand(37, generator=g, dtype=torch.float64) + 0.01
    tree.update(torch.arange(37), priority)
    tree.update(torch.tensor([3, 3, 20]), torch.tensor([2.0, 2.0, 0.5], dtype=torch.float64))  # repeats allowed
    priority[3], priority[20] = 2.0, 0.5
    assert tree.total().item() == pytest.approx(priority.sum().item())
    mass = torch.rand(1000, generator=g, dtype=torch.float64) * priority.sum()
    expected = torch.searchsorted(priority.cumsum(0), mass, right=True)
    assert torch.equal(tree.find(mass), expected)


def test_prioritized_sampling_follows_the_priorities_with_importance_weights() -> None:
    shapes = {
        "obs": (1, 1),
        "state": (1,),
        "action": (1, 2),
        "reward": (1,),
        "next_obs": (1, 1),
        "next_state": (1,),
        "done": (),
    }
    buffer = ReplayBuffer(8, shapes, torch.device("cpu"), prioritized=True, alpha=1.0)
    buffer.add(**{name: torch.arange(4.0).view(4, *([1] * len(s))).expand(4, *s) for name, s in shapes.items()})
    buffer.update_priorities(torch.arange(4), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    batch = buffer.sample(40_000, torch.Generator().manual_seed(0), beta=1.0)
    freq = torch.bincount(batch.index, minlength=4).double() / 40_000
    torch.testing.assert_close(freq, torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64), atol=0.01, rtol=0)
    torch.testing.assert_close(batch.state[:, 0], batch.index.float())  # the stored rows come back
    # w_i = (N p_i)^-beta / max w: with beta = 1 the weights are min_p / p_i
    # w_i = (N p_i)^-beta / max w; beta = 1, p_i = (i + 1) / 10, the max at i = 0: w_i = 1 / (i + 1)
    torch.testing.assert_close(batch.weight, 1.0 / (batch.index.float() + 1))


def test_ring_buffer_overwrites_the_oldest_and_round_trips_through_its_state() -> None:
    shapes = {
        "obs": (2, 3),
        "state": (4,),
        "action": (2, 2),
        "reward": (2,),
        "next_obs": (2, 3),
        "next_state": (4,),
        "done": (),
    }
    buffer = ReplayBuffer(5, shapes, torch.device("cpu"))
    for start in (0, 3):
        buffer.add(
            **{
                name: torch.full((3, *s), float(start)) + torch.arange(3.0).view(3, *([1] * len(s)))
                for name, s in shapes.items()
            }
        )
    assert len(buffer) == 5 and buffer.data["state"][:, 0].tolist() == [5.0, 1.0, 2.0, 3.0, 4.0]
    copy = ReplayBuffer(5, shapes, torch.device("cpu"))
    copy.load_state_dict(buffer.state_dict())
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(copy.sample(16, g1).obs, buffer.sample(16, g2).obs)


def test_a_saved_buffer_takes_the_space_of_its_filled_rows_not_its_capacity(tmp_path) -> None:
    shapes = {
        "obs": (2, 3),
        "state": (4,),
        "action": (2, 2),
        "reward": (2,),
        "next_obs": (2, 3),
        "next_state": (4,),
        "done": (),
    }
    small, large = (ReplayBuffer(capacity, shapes, torch.device("cpu")) for capacity in (10, 100_000))
    for buffer in (small, large):
        buffer.add(**{name: torch.ones(3, *s) for name, s in shapes.items()})
        (tmp_path / str(buffer.capacity)).mkdir()
        torch.save(buffer.state_dict(), tmp_path / str(buffer.capacity) / "buffer.pt")
    sizes = [(tmp_path / str(capacity) / "buffer.pt").stat().st_size for capacity in (10, 100_000)]
    assert sizes[1] == sizes[0] < 20_000  # 3 rows either way (a full-capacity slice: ~11 MB)


def test_a_learning_curve_of_one_validation_draws_its_references_across(tmp_path) -> None:
    """A short run validates once: the policy is a dot, the planner's and nearest target's returns are levels
    across the whole plot (they were single points with no marker, drawn nowhere)."""
    import matplotlib.image

    from uavgnn.reporting.episodes import plot_learning_curve

    history = [{"step": 20, "val/return": 0.0, "val/planner_return": 5.3, "val/nearest_return": 4.7}]
    image = matplotlib.image.imread(plot_learning_curve(history, tmp_path / "curve.png"))[..., :3]
    for colour in ((0x2C, 0xA0, 0x2C), (0xD6, 0x27, 0x28)):  # matplotlib's C2 (planner) and C3 (nearest)
        hits = (abs(image - torch.tensor(colour).numpy() / 255) < 0.02).all(-1)
        assert hits.any(0).mean() > 0.5  # in more than half of the picture's columns: a line across


@pytest.mark.parametrize("host_prefetch", [False, True])
def test_a_resumed_masac_run_repeats_the_uninterrupted_one_exactly(tmp_path, host_prefetch) -> None:
    """Environments, replay buffer (with its priorities), generators, weights and - with a host buffer and
    ``optim.prefetch`` - the batch drawn ahead all come back from last.pt. The first half stops at its own
    train.steps: an LR and beta schedule that do not depend on it."""
    prefetch = ["hardware.data_on_device=false", "optim.prefetch=true"] if host_prefetch else []
    a, b = straight_and_resumed(
        lambda steps: compose_masac(
            tmp_path,
            f"train.steps={steps}",
            "algorithm.prioritized=true",
            "train.schedule=plateau",
            "algorithm.priority_beta=1.0",
            *prefetch,
        ),
        tmp_path,
    )
    assert (a["data"]["ahead"] is not None) == host_prefetch
    for name, value in a["model"].items():
        torch.testing.assert_close(b["model"][name], value, rtol=0, atol=0)
    torch.testing.assert_close(b["data"]["buffer"]["data"]["obs"], a["data"]["buffer"]["data"]["obs"], rtol=0, atol=0)


def test_prefetch_draws_each_batch_one_collection_ahead_from_the_host_buffer(tmp_path) -> None:
    """With the buffer on the host and ``optim.prefetch``, step k's batch is drawn (the replay stream at k) from
    the buffer as it stood after step k - 1's collection; without prefetch, after step k's own."""
    from uavgnn.infrastructure.randomness import stream

    def batches(*overrides: str) -> list[tuple[Transitions, int]]:
        cfg = compose_masac(tmp_path, "hardware.data_on_device=false", "seed=5", *overrides)
        work = make_algorithm(cfg, torch.device("cpu")).workload(make_model(cfg))
        out = []
        for step in range(3):
            filled = len(work.buffer)  # before this step's collection
            work.collect(step)
            out.append((work.batch(step, 0, 32), filled))
        return out

    ahead, fresh = batches("optim.prefetch=true"), batches("optim.prefetch=false")
    per_step = 8  # env.n_envs transitions per collection
    for step, ((early, filled), (late, _)) in enumerate(zip(ahead, fresh)):
        seen = per_step if step == 0 else filled  # step 0 has nothing drawn ahead: it samples after collecting
        g = stream(5, "replay", step)
        assert torch.equal(early.index, torch.randint(0, seen, (32,), generator=g))
        g = stream(5, "replay", step)
        assert torch.equal(late.index, torch.randint(0, filled + per_step, (32,), generator=g))


def test_observation_graph_links_each_uav_to_what_it_sees() -> None:
    from uavgnn.envs.settings import EnvSettings
    from uavgnn.envs.uav_env import UAVEnv
    from uavgnn.problem.observation import observation_graph
    from uavgnn.problem.scenes import SceneDistribution

    settings = EnvSettings(n_uav=3, obs_targets=4, obs_uavs=2)  # 3 UAVs see 2 targets (ratio 0.5) and 2 UAVs
    env = UAVEnv(settings, SceneDistribution(), 2, torch.device("cpu"), seed=0)
    obs, _ = env.reset()
    graph = observation_graph(obs, settings.layout())
    assert graph.x.shape[:2] == (2 * 3, 1 + 4 + 2) and graph.mask.shape == (6, 7, 7)  # the same shape whatever is seen
    assert not graph.mask[:, 1:].any()  # only the UAV (node 0) receives
    assert graph.mask[:, 0].nonzero()[:, 1].view(6, 4).tolist() == [[1, 2, 5, 6]] * 6  # 2 seen targets, 2 neighbours
    torch.testing.assert_close(graph.attr[0, 0, 1], obs[0, 0, 6:8])  # relative target position
    torch.testing.assert_close(graph.x[:, 0, :6], obs[..., :6].flatten(0, 1))  # the UAV's own features


def test_linked_observation_graph_adds_each_seen_uav_to_each_seen_target() -> None:
    """``env.obs_links``: a hand-made observation, one seen target at (1, 0) and one neighbour at (0, 1), a target
    slot and a neighbour slot empty: the neighbour -> target carries (1, -1); nothing leaves or enters an empty slot."""
    from uavgnn.problem.observation import ObservationLayout, observation_graph

    obs = torch.zeros(1, ObservationLayout(2, 2).obs_dim)
    obs[0, 6:8], obs[0, 12] = torch.tensor([1.0, 0.0]), 1.0  # target slot 0 (node 1) seen; slot 1 (node 2) empty
    obs[0, 20:22], obs[0, 24] = torch.tensor([0.0, 1.0]), 1.0  # neighbour slot 0 (node 3) heard; slot 1 (node 4) not
    graph = observation_graph(obs, ObservationLayout(2, 2, links=True))
    assert graph.mask[0].nonzero().tolist() == [[0, 1], [0, 3], [1, 3]]  # (receiver, sender)
    assert graph.attr[0, 1, 3].tolist() == [1.0, -1.0] and graph.attr[0, 0, 3].tolist() == [0.0, 1.0]
    star = observation_graph(obs, ObservationLayout(2, 2))
    assert star.mask[0].nonzero().tolist() == [[0, 1], [0, 3]]  # off (the default): the star alone


@pytest.mark.parametrize("links", [False, True])
def test_the_graph_actor_equals_pyg_layers_on_what_each_uav_sees(links: bool) -> None:
    """The actor's dense attention (the last layer computing only each UAV's node) equals PyG's ``TransformerConv``
    run on the edge list of what each UAV sees, in fp64 (the graph's edges themselves: the two tests above);
    building the graph reads nothing back (a host sync on a GPU), and what an empty slot holds changes nothing."""
    from uavgnn.envs.settings import EnvSettings
    from uavgnn.envs.uav_env import UAVEnv
    from uavgnn.infrastructure.perf import OpCounter
    from uavgnn.models.graph_actor import GraphActor
    from uavgnn.problem.observation import NEIGHBOUR_FEATURES, observation_graph
    from uavgnn.problem.scenes import SceneDistribution

    # slots empty for both reasons (fewer targets, neighbours not heard)
    settings = EnvSettings(n_uav=5, obs_targets=4, obs_uavs=3, comm_radius=0.8, obs_links=links)
    layout = settings.layout()
    obs, _ = UAVEnv(settings, SceneDistribution(target_ratio=0.5), 3, torch.device("cpu"), seed=2).reset()
    obs = obs.double()
    seen = layout.self_features + layout.target_features * layout.obs_targets
    targets = obs[..., layout.self_features : seen].unflatten(-1, (layout.obs_targets, layout.target_features))
    uavs = obs[..., seen:].unflatten(-1, (layout.obs_uavs, NEIGHBOUR_FEATURES))
    targets[0, 0, :, -1] = uavs[0, 0, :, -1] = 0.0  # one UAV sees nothing at all
    assert (targets[..., -1] == 0).any() and (uavs[..., -1] == 0).any() and (targets[..., -1] == 1).any()
    torch.manual_seed(0)
    actor = GraphActor(layout, 2, hidden=16, heads=2, layers=2, ffn_mult=2).double().eval()
    with OpCounter() as counted:
        graph = observation_graph(obs, layout)
    assert counted.syncs == 0
    rows, nodes, _ = graph.x.shape
    row, receiver, sender = graph.mask.nonzero().T
    edge_index = torch.stack([row * nodes + sender, row * nodes + receiver])
    h = actor.encode(graph.x.reshape(rows * nodes, -1))
    for layer in actor.layers:
        h = layer(h, edge_index, graph.attr[row, receiver, sender])
    expected = actor.head(actor.norm(h.view(rows, nodes, -1)[:, 0])).view(3, 5, 2)
    torch.testing.assert_close(actor(obs), expected, rtol=0, atol=1e-10)
    noisy = obs.clone()  # every feature of every empty slot but its present flag made noise
    for part, slots in ((layout.self_features, targets), (seen, uavs)):
        empty = (slots[..., -1:] == 0).expand_as(slots).clone()
        empty[..., -1] = False
        noise = torch.where(empty, torch.rand_like(slots), 0.0).flatten(-2)
        noisy[..., part : part + noise.shape[-1]] += noise
    assert not torch.equal(noisy, obs)
    torch.testing.assert_close(actor(noisy), actor(obs), rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="model.layers=0"):  # it would read no neighbour: one clear line
        GraphActor(layout, 2, hidden=16, heads=2, layers=0, ffn_mult=2)


@pytest.mark.parametrize("links", [False, True])
def test_target_scores_give_each_target_slot_its_logit_from_its_node_by_hand(links: bool) -> None:
    """``target_scores``: a target slot's logit is ``score(norm(the UAV's embedding), norm(that slot's embedding as
    the last layer reads it))``, PyG's layers computing both; stay and home come from the UAV's node. So swapping
    two seen targets in the observation swaps their logits and leaves the others as they were (the plain head
    reads one attention-weighted sum and does not)."""
    from uavgnn.envs.settings import EnvSettings
    from uavgnn.envs.uav_env import UAVEnv
    from uavgnn.models.graph_actor import GraphActor
    from uavgnn.problem.observation import observation_graph
    from uavgnn.problem.scenes import SceneDistribution

    settings = EnvSettings(n_uav=6, obs_targets=3, obs_uavs=2, action="goto", goto_home=True, obs_links=links)
    layout, outputs = settings.layout(), settings.action_dim()  # stay, 3 targets, home
    obs, _ = UAVEnv(settings, SceneDistribution(target_ratio=0.5), 4, torch.device("cpu"), seed=3).reset()
    obs = obs.double()
    torch.manual_seed(0)
    actor = GraphActor(layout, outputs, hidden=16, heads=2, layers=2, ffn_mult=2, target_scores=True).double()
    graph = observation_graph(obs, layout)
    rows, nodes, _ = graph.x.shape
    row, receiver, sender = graph.mask.nonzero().T
    edge_index = torch.stack([row * nodes + sender, row * nodes + receiver])
    h = actor.encode(graph.x.reshape(rows * nodes, -1))
    h = actor.layers[0](h, edge_index, graph.attr[row, receiver, sender])
    slots = actor.norm(h.view(rows, nodes, -1)[:, 1:4])
    own = actor.norm(actor.layers[1](h, edge_index, graph.attr[row, receiver, sender]).view(rows, nodes, -1)[:, 0])
    rest = actor.head(own)
    scores = torch.stack([actor.score(torch.cat([own, slots[:, k]], -1)).squeeze(-1) for k in range(3)], -1)
    expected = torch.cat([rest[:, :1], scores, rest[:, 1:]], -1).view(4, 6, outputs)
    torch.testing.assert_close(actor(obs), expected, rtol=0, atol=1e-10)
    start, width = layout.self_features, layout.target_features
    seen_two = (obs[..., start + width - 1] > 0) & (obs[..., start + 2 * width - 1] > 0)
    assert seen_two.any()
    swapped = obs.clone()
    swapped[..., start : start + width] = obs[..., start + width : start + 2 * width]
    swapped[..., start + width : start + 2 * width] = obs[..., start : start + width]
    before, after = actor(obs)[seen_two], actor(swapped)[seen_two]
    torch.testing.assert_close(after[:, [0, 2, 1, 3, 4]], before, rtol=0, atol=1e-10)
    plain = GraphActor(layout, outputs, hidden=16, heads=2, layers=2, ffn_mult=2).double()
    assert not torch.allclose(plain(swapped)[seen_two][:, [0, 2, 1, 3, 4]], plain(obs)[seen_two])


def test_the_shared_graph_actor_treats_every_uav_alike_and_runs_on_any_swarm_size() -> None:
    from uavgnn.envs.settings import EnvSettings
    from uavgnn.envs.uav_env import UAVEnv
    from uavgnn.problem.scenes import SceneDistribution

    small = EnvSettings(n_uav=4)
    agents = MASACAgents(
        MASACSettings(
            4, small.obs_dim(), small.state_dim(SceneDistribution()), 2, 32, 2, 32, 2, 0.95, 0.2, (small.layout(), 2, 2)
        )
    )
    env = UAVEnv(EnvSettings(n_uav=64), SceneDistribution(), 3, torch.device("cpu"), seed=1)
    obs, _ = env.reset()
    actions = agents.act(obs, None, None)  # trained for 4 UAVs, acting for 64
    assert actions.shape == (3, 64, 2) and actions.abs().max() <= 1
    swapped = obs[:, [1, 0, *range(2, 64)]]
    torch.testing.assert_close(agents.act(swapped, None, None), actions[:, [1, 0, *range(2, 64)]])


def test_masac_with_the_graph_actor_trains_in_the_shared_loop(tmp_path) -> None:
    cfg = compose_masac(tmp_path, "model=tiny", "train.steps=4", "train.eval_every=4", "train.ckpt_every=4")
    out = tmp_path / "gnn"
    out.mkdir()
    logger = MetricLogger(out, cfg.logger, config={})
    try:
        result = train(cfg, out, logger)
    finally:
        logger.finish()
    assert result.state.step == 4 and "val/planner_gap" in result.val
    assert any(name.startswith("actors.layers.0.attn") for name, _ in result.model.named_parameters())
