"""CBBA, the consensus-based bundle algorithm (Choi, Brunet and How, IEEE T-RO 2009): the decentralised task
allocator the multi-UAV literature compares with, over the communication graph a policy observes.

Every step each live UAV runs the auction anew on what the swarm knows of the targets (the open, visible ones, as
the central planner) and on what it hears of the others: the UAVs it observes (``UAVEnv.neighbours``: its
``obs_uavs`` nearest among those it hears - within ``comm_radius``, not failed, their message that step not lost)
- the links of a policy's observation, nothing more.

- Bundles of one target (a ``goto`` action names one): the single-assignment case of CBBA (CBAA). A target that
  needs d UAVs offers d slots, each worth ``value / d - lam * distance`` to a UAV with the range to reach it.
- A round: each UAV holding nothing bids on the slot it values most among those where it beats the best bid it
  knows of (equal bids: the lower-numbered UAV); then each takes, slot by slot, the best bid (and its bidder) among
  its own view and those of the UAVs it hears (max-consensus); a UAV whose slot another won is free again.
- The cooperation constraint (the pessimistic strategy of Whitten, Choi, Johnson and How 2011 for coupled tasks):
  once an environment's views stop changing, every UAV drops from its own bidding each target its view shows
  partly won - fewer winners than its need pays nothing - and a UAV holding one is free again; the auction goes on.
- It ends where nothing changes and nothing is dropped (at most ``max_rounds``; ``Allocation.capped`` says where
  that cut it short); each environment's rounds are counted, and the messages: each round every live UAV receives
  the view of each UAV it hears. Whether nothing changed is read across the environment at once: a swarm would
  learn it over more rounds (about its graph's diameter), so the rounds and messages counted are a lower bound.

On a connected graph the auction ends where the sequential greedy allocation by slot value ends (CBAA's result;
tests check it against that greedy written out pair by pair); on a disconnected one each part allocates alone and
two parts may send UAVs to one target, as they would. Batched over environments, UAVs and slots: the loop is over
rounds (two host reads a round: whether any environment ended, whether any settled), never over environments or
UAVs; an environment leaves the batch when its auction ends. ``scene_auction`` poses a static scene's assignment
problem (the MILP's) the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from uavgnn.envs.policies import assignment_action
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.problem.neighbours import nearest_uavs
from uavgnn.problem.scenes import Scene
from uavgnn.solvers.bound import slot_profit


@dataclass
class Auction:
    """One step's allocation problem: each UAV's value of each slot (E, N, S; 0 where it cannot bid: out of range,
    not worth it, not open, no such slot, a UAV that is down), the target of each slot (S,), the targets' needs (E,
    M), the UAVs each one hears (E, N, K) and which of those exist (E, N, K)."""

    value: torch.Tensor
    slot_target: torch.Tensor
    need: torch.Tensor
    heard: torch.Tensor
    present: torch.Tensor


@dataclass
class Allocation:
    """What the auction decided: each UAV's target (E, N; -1 none), each environment's rounds (E,), messages
    received (E,) and whether ``max_rounds`` ended it before it settled (E,)."""

    target: torch.Tensor
    rounds: torch.Tensor
    messages: torch.Tensor
    capped: torch.Tensor


def auction_of(env: UAVEnv) -> Auction:
    """The allocation problem of ``env``'s current step (module docstring)."""
    need_max, n_target = env.dist.need_max, env.n_target
    slot_target = torch.arange(n_target * need_max, device=env.device) // need_max
    slot_rank = torch.arange(n_target * need_max, device=env.device) % need_max
    dist = env.target_distance()  # (E, N, M)
    worth = env.value / env.need.clamp(min=1)  # (E, M) a slot's share of the target's value
    profit = worth[:, None] - env.dist.lam * dist
    live = live_uavs(env)
    can = (dist <= env.energy[..., None]) & env.visible()[:, None] & live[..., None] & (profit > 0)
    value = torch.where(can, profit, 0.0)[..., slot_target]  # (E, N, S)
    value = value * (slot_rank < env.need[:, slot_target])[:, None]  # only the target's need of slots
    return Auction(value, slot_target, env.need, *links(env, live))


def scene_auction(scenes: Sequence[Scene], obs_uavs: int | None = None) -> Auction:
    """The static assignment problem of ``scenes`` (one number of UAVs) as one auction: a UAV earns
    ``slot_profit`` in each slot of a target within its range (the MILP's objective, shared among the target's
    slots), hearing every other UAV (``obs_uavs`` None: the MILP's full information) or its ``obs_uavs`` nearest."""
    n, m = scenes[0].n_uav, max(scene.n_target for scene in scenes)
    need_max = max(int(scene.need.max()) for scene in scenes)
    value = np.zeros((len(scenes), n, m))
    need = np.ones((len(scenes), m), np.int64)  # targets a scene lacks: one slot, worth nothing
    for b, scene in enumerate(scenes):  # once per scene, outside the auction
        dist = np.linalg.norm(scene.uav_pos[:, None] - scene.target_pos[None], axis=-1)
        target = np.broadcast_to(np.arange(scene.n_target), dist.shape)
        profit = slot_profit(scene, target, dist)
        value[b, :, : scene.n_target] = np.where(dist <= scene.uav_range[:, None], profit.clip(min=0), 0.0)
        need[b, : scene.n_target] = scene.need
    k = n - 1 if obs_uavs is None else min(obs_uavs, n - 1)
    heard = np.stack([nearest_uavs(scene.uav_pos, k)[1].reshape(n, k) for scene in scenes])
    slot_target, slot_rank = np.arange(m * need_max) // need_max, np.arange(m * need_max) % need_max
    slot_value = value[..., slot_target] * (slot_rank < need[:, slot_target])[:, None]
    return Auction(
        torch.as_tensor(slot_value, dtype=torch.float32),
        torch.as_tensor(slot_target),
        torch.as_tensor(need),
        torch.as_tensor(heard),
        torch.ones(heard.shape, dtype=torch.bool),
    )


def live_uavs(env: UAVEnv) -> torch.Tensor:
    """(E, N) the UAVs that act: range left, not failed."""
    down = env.down()
    return (env.energy > 0) if down is None else (env.energy > 0) & ~down


def links(env: UAVEnv, live: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Whom each live UAV hears this step (the observation's links, ``UAVEnv.neighbours``): indices (E, N, K) and
    which exist (E, N, K)."""
    heard, present, _ = env.neighbours()
    return heard, present & (live_uavs(env) if live is None else live)[..., None]


def allocate(auction: Auction, max_rounds: int) -> Allocation:
    """The auction's outcome (module docstring), at most ``max_rounds`` rounds. Only the slots some UAV can bid on
    take part (in their order: the same outcome); a bid and its bidder travel as one int64 key (``bid_key``), so
    consensus is one maximum; environments drop out of the batch as they end."""
    e, n, _ = auction.value.shape
    device = auction.value.device
    biddable = (auction.value > 0).any(1)  # (E, S)
    width = max(int(biddable.sum(1).max()), 1)
    order = biddable.to(torch.int8).sort(dim=1, descending=True, stable=True).indices[:, :width]  # (E, S')
    value = auction.value.gather(2, order[:, None].expand(e, n, width))
    me = torch.arange(n, device=device).expand(e, n)
    state = _Bids(
        mine=bid_key(value, me[..., None]),
        view=torch.zeros(value.shape, dtype=torch.long, device=device),
        held=torch.full((e, n), -1, dtype=torch.long, device=device),
        dropped=torch.zeros(value.shape, dtype=torch.bool, device=device),
        slot_target=auction.slot_target[order],
        need=auction.need,
        links=torch.where(auction.present, auction.heard, me[..., None]),  # an absent link: the UAV's own view
        envs=torch.arange(e, device=device),
        everyone=auction.heard.shape[2] == n - 1 and bool(auction.present.all()),
    )
    target = torch.full((e, n), -1, dtype=torch.long, device=device)
    rounds = torch.zeros(e, dtype=torch.long, device=device)
    for _ in range(max_rounds):
        rounds[state.envs] += 1
        running = state.round()
        if not bool(running.all()):  # the ended environments' allocations out, the rest on
            target[state.envs[~running]] = state.targets()[~running]
            state = state.select(running)
            if not len(state.envs):
                break
    target[state.envs] = state.targets()  # those that ran out of rounds
    capped = torch.zeros(e, dtype=torch.bool, device=device)
    capped[state.envs] = True
    return Allocation(target, rounds, rounds * auction.present.sum((1, 2)), capped)


_LOW = 2**32 - 1  # the low half of a key: ``_LOW - bidder``


def bid_key(bid: torch.Tensor, bidder: torch.Tensor) -> torch.Tensor:
    """A bid (float32 >= 0) and its bidder as one int64 that orders as CBBA does: higher bids first, equal bids to
    the lower bidder (a non-negative float's bits order as the float; the bidder's index is stored inverted). 0:
    no bid."""
    bits = bid.float().contiguous().view(torch.int32).long()
    return torch.where(bid > 0, (bits << 32) | (_LOW - bidder), 0)


@dataclass
class _Bids:
    """The auction's state in the environments still running (``envs``): each UAV's own key on each slot
    (``mine``), its view of the best key on each (``view``), the slot it holds (-1 none), the slots of targets it
    gave up; per environment the target of each slot, the needs and whom each UAV hears (``links`` (E, N, K);
    itself for no one; ``everyone``: each hears every other UAV)."""

    mine: torch.Tensor
    view: torch.Tensor
    held: torch.Tensor
    dropped: torch.Tensor
    slot_target: torch.Tensor
    need: torch.Tensor
    links: torch.Tensor
    envs: torch.Tensor
    everyone: bool = False

    def round(self) -> torch.Tensor:
        """One round in place - bid, hear, give up what was outbid, and where nothing changed, the partly won
        targets; which environments go on (something changed or was given up)."""
        changed = self._bid() | self._consensus()
        held = self.held.clamp(min=0)[..., None]
        outbid = (self.held >= 0) & (self.view.gather(2, held) != self.mine.gather(2, held)).squeeze(2)
        self.held = self.held.masked_fill(outbid, -1)
        changed |= outbid.any(1)
        return changed | self._drop_partial(~changed)

    def _bid(self) -> torch.Tensor:
        """Each UAV holding nothing bids on its most valued slot among those it would win on its view (equal
        values: the lower slot); which environments saw a bid."""
        offer = torch.where((self.mine > self.view) & ~self.dropped & (self.held < 0)[..., None], self.mine, 0)
        best, slot = offer.max(2)
        bids = best > 0
        self.view.scatter_reduce_(2, slot[..., None], best[..., None], "amax")
        self.held = torch.where(bids, slot, self.held)
        return bids.any(1)

    def _consensus(self) -> torch.Tensor:
        """Each UAV's view merged with those of the UAVs it hears: slot by slot the highest key; which
        environments' views rose."""
        e, n, s = self.view.shape
        if self.links.shape[2] == 0:  # nobody hears anybody: nothing to merge
            return torch.zeros(e, dtype=torch.bool, device=self.view.device)
        if self.everyone:
            theirs = self.view.amax(1, keepdim=True).expand(e, n, s)
        else:
            rows = (self.links + n * torch.arange(e, device=self.view.device)[:, None, None]).flatten()
            theirs = self.view.view(e * n, s).index_select(0, rows).view(e, n, -1, s).amax(2)
        rose = (theirs > self.view).flatten(1).any(1)
        torch.maximum(self.view, theirs, out=self.view)
        return rose

    def _drop_partial(self, quiet: torch.Tensor) -> torch.Tensor:
        """Where the views settled (``quiet``), each UAV gives up the targets its view shows partly won (fewer
        winners than the need) and frees itself of one it holds; which environments gave any up."""
        if not bool(quiet.any()):
            return quiet
        slot_target = self.slot_target[:, None].expand(self.view.shape)
        won = torch.zeros(*self.view.shape[:2], self.need.shape[1], device=self.view.device)
        won.scatter_add_(2, slot_target, (self.view > 0).float())
        partial = (won > 0) & (won < self.need[:, None]) & quiet[:, None, None]
        newly = partial.gather(2, slot_target) & ~self.dropped
        self.dropped |= newly
        release = (self.held >= 0) & newly.gather(2, self.held.clamp(min=0)[..., None]).squeeze(2)
        self.held = self.held.masked_fill(release, -1)
        return newly.flatten(1).any(1)

    def targets(self) -> torch.Tensor:
        """(E, N) the target of the slot each UAV holds (-1 none)."""
        return torch.where(self.held >= 0, self.slot_target.gather(1, self.held.clamp(min=0)), -1)

    def select(self, keep: torch.Tensor) -> _Bids:
        """The state of the environments ``keep`` (E,) picks."""
        tensors = (getattr(self, f.name)[keep] for f in dataclasses.fields(self) if f.name != "everyone")
        return _Bids(*tensors, everyone=self.everyone)


@dataclass
class CBBAPlanner:
    """CBBA as a policy ``(env) -> action``: every step the auction anew, each UAV flown at the target it won (as
    the scripted planner flies); ``max_rounds`` None: ``4 * N`` (a cap, not a bound: it ends where nothing changes,
    in the measured swarms far sooner; ``capped`` counts the decisions it cut short). Counts what its decisions
    (environment-steps) cost:
    rounds and messages received, summed on the device."""

    max_rounds: int | None = None
    rounds: torch.Tensor | float = 0.0
    messages: torch.Tensor | float = 0.0
    capped: torch.Tensor | float = 0.0
    decisions: int = 0
    uav_decisions: int = 0

    def __call__(self, env: UAVEnv) -> torch.Tensor:
        allocation = allocate(auction_of(env), self.max_rounds or 4 * env.n_uav)
        self.rounds = self.rounds + allocation.rounds.sum()
        self.messages = self.messages + allocation.messages.sum()
        self.capped = self.capped + allocation.capped.sum()
        self.decisions += env.n_envs
        self.uav_decisions += env.n_envs * env.n_uav
        return assignment_action(env, allocation.target)

    def costs(self) -> dict[str, float]:
        """Rounds per decision and messages per UAV per decision, so far."""
        return {
            "rounds": float(self.rounds) / max(self.decisions, 1),
            "messages_per_uav": float(self.messages) / max(self.uav_decisions, 1),
        }


@dataclass
class HeardLinks:
    """A policy that acts on what its UAVs hear (the observation's links: one message a link a step), counting
    them as ``CBBAPlanner`` counts its messages."""

    policy: Callable[[UAVEnv], torch.Tensor]
    messages: torch.Tensor | float = 0.0
    decisions: int = 0
    uav_decisions: int = 0

    def __call__(self, env: UAVEnv) -> torch.Tensor:
        self.messages = self.messages + links(env)[1].sum()
        self.decisions += env.n_envs
        self.uav_decisions += env.n_envs * env.n_uav
        return self.policy(env)

    def costs(self) -> dict[str, float]:
        """One round per decision; messages per UAV per decision, so far."""
        return {"rounds": 1.0, "messages_per_uav": float(self.messages) / max(self.uav_decisions, 1)}
