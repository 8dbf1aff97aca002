"""One source of randomness: named streams of (seed, purpose, step, rank), pure and independent of each other;
MASAC's exploration, update noise and replay sampling each draw from their own."""

from __future__ import annotations

import itertools

import pytest
import torch
from conftest import compose_masac

from uavgnn.algorithms.registry import algorithms, make_algorithm
from uavgnn.infrastructure.randomness import STREAMS, declare, stream, stream_seed

DECLARED = {purpose: name for name, found in algorithms().items() for purpose in found.streams}  # the plug-ins'

CPU = torch.device("cpu")


def test_a_stream_is_a_pure_function_of_its_names() -> None:
    first = torch.rand(100, generator=stream(3, "replay", 17, 1))
    assert torch.equal(first, torch.rand(100, generator=stream(3, "replay", 17, 1)))
    with pytest.raises(ValueError, match="unknown random stream 'replays'"):
        stream_seed(3, "replays")


def test_every_seed_purpose_step_and_rank_has_its_own_stream() -> None:
    """No two of 2 seeds x every purpose (shared and the plug-ins') x 500 steps x 4 ranks share a seed (the old
    ``seed * 1_000_003 + step`` gave every purpose of a step the same one)."""
    names = list(itertools.product((0, 1), [*STREAMS, *DECLARED], range(500), range(4)))
    assert len({stream_seed(*name) for name in names}) == len(names)


def test_exploration_update_noise_and_replay_draws_are_uncorrelated() -> None:
    """The uniforms behind each purpose's draws, over 400 steps: Pearson |r| < 0.03 for every pair
    (about 5 standard errors at n = 25,600). The formula they replace drew them from one seed: r = 1."""
    steps, draws = range(400), 64
    uniforms = {
        purpose: torch.cat([torch.rand(draws, generator=stream(5, purpose, step)) for step in steps])
        for purpose in ("exploration", "update_noise", "replay")
    }
    for a, b in itertools.combinations(uniforms, 2):
        r = torch.corrcoef(torch.stack([uniforms[a], uniforms[b]]))[0, 1]
        assert abs(float(r)) < 0.03, (a, b, float(r))
    old = [torch.rand(draws, generator=torch.Generator().manual_seed(5 * 1_000_003 + step)) for step in steps]
    assert torch.corrcoef(torch.stack([torch.cat(old), torch.cat(old)]))[0, 1] == pytest.approx(1.0)


def test_masac_draws_each_purpose_from_its_own_stream(tmp_path) -> None:
    """Exploration (the random actions before ``learning_starts``), replay sampling and the update's noise are
    the draws of their named streams, as the loop makes them."""
    cfg = compose_masac(tmp_path, "seed=5")
    masac = make_algorithm(cfg, CPU)
    agents = masac.build_model(cfg)
    work = masac.workload(agents)
    work.collect(0)  # 8 environments x 1 step of random actions: the exploration stream's first draws
    explored = torch.rand(8, cfg.env.n_uav, 2, generator=stream(5, "exploration")) * 2 - 1
    assert torch.equal(work.buffer.state_dict()["data"]["action"][:8], explored)
    batch = work.batch(0, 0, 32)
    assert torch.equal(batch.index, torch.randint(0, 8, (32,), generator=stream(5, "replay", 0)))
    noise, _ = masac.draws(batch, 0)
    shape = (2, agents.s.n_agents, 32, agents.s.action_dim)
    assert torch.equal(noise, torch.randn(shape, generator=stream(5, "update_noise", 0))[0])


def test_a_plug_in_declares_its_own_streams_in_its_class() -> None:
    """A plug-in that draws noise must not have to edit the services layer (a central ``STREAMS`` that knew MASAC's
    and REINFORCE's streams and refused others). Each declares its own (``Algorithm.streams``); a name is one
    owner's."""
    assert DECLARED == {"update_noise": "masac", "rollouts": "reinforce"} and not set(DECLARED) & set(STREAMS)
    declare("toy", {"toy_noise": "a toy plug-in's draws"})
    assert stream_seed(1, "toy_noise", 2) == stream_seed(1, "toy_noise", 2) != stream_seed(1, "replay", 2)
    with pytest.raises(ValueError, match="random stream 'update_noise' of toy is already masac's"):
        declare("toy", {"update_noise": "another's noise"})
    with pytest.raises(ValueError, match="random stream 'replay' of toy is already uavgnn's"):
        declare("toy", {"replay": "a shared stream"})
