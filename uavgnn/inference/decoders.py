"""Decoders: model scores -> feasible assignments, batched over every scene of a batch.

- ``argmax``: each UAV takes its most likely choice (fast; may over- or
  under-fill targets).
- ``greedy``: capacity-aware. UAVs propose their most likely target; each
  target keeps its ``need`` most likely proposers and rejects the rest, who
  propose their next choice (deferred acceptance, i.e. edges by probability,
  filling each target up to its need). When no proposals are left, targets
  still short of their need are closed and their UAVs released, and
  proposing resumes. Every candidate edge may be proposed, not only those
  more likely than idling: on 512 test scenes of 16 UAVs that halves the
  gap (9.9% -> 5.3%), because the last UAV a target needs is often one the
  model finds nearly as likely idle. Each UAV's candidates are sorted
  once, so a UAV's next proposal is a pointer moved past its dead candidates,
  looking several ahead at once (``LOOK_AHEAD``), and a round re-ranks only
  the targets that received proposals: a round's work is in the free UAVs and
  the proposals, not in every candidate (BENCHMARKS.md). The loop is over
  rounds, never over UAVs.

- staged (``greedy`` when the model's ``Balancing.stages`` S > 1, ``model.commit_stages``): the decision is
  made target by target, the surest first, in S stages. Stage s greedy-decodes the policy and keeps each
  complete target all of whose UAVs chose it with probability at least 1 - s / S; the kept UAVs and targets
  leave, the other UAVs' policy is renormalised without them and re-balanced against the needs
  (``capacity_balanced``, as many rounds as the model balances, at most ``STAGE_ITERS``), and the next stage
  decodes that; the last keeps every target. A UAV whose likely target was taken by surer UAVs moves its mass
  to its next choices before the greedy decode has to settle it, so the targets still open are filled from it.
  It reads nothing but the policy and the needs (no distance, no value): a decoder, not a repair pass; deciding
  in stages lowers the gap at every scale (BENCHMARKS.md).
  On a GPU (``decode`` on CUDA) every greedy decode of the stages runs in at most ``SYNC_FREE_ROUNDS``
  fixed-shape rounds (``fixed_round_greedy``), the host reading whether they converged every ``CHECK_EVERY``:
  a few host reads instead of one per loop pass, and the launches converging takes instead of all the rounds'.

- ``sample``: the best, by the true reward J, of ``samples`` assignments per
  scene: sample 0 is the model's decision (greedy or staged), the others run the greedy
  decoder on Gumbel-perturbed log-probabilities (a sample of the policy's
  preference order). All samples of all scenes are decoded in one call
  (the batch replicated ``samples`` times) and scored together.

``repair`` (optional, after any decoder): ``solvers.repair.repair_assignment``, a target left partial filled
with idle UAVs or dropped. Afterwards no target is partial.

Candidates are feasible by construction (a padded batch's padding slots
have probability 0 and are never proposed), so every decoder's output is
feasible; ``greedy`` and ``sample`` also never over-assign and never leave a
target partial.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch
from torch_geometric.data import Batch

from uavgnn.models.choices import Balancing, best_choice, capacity_balanced, choice_log_probs
from uavgnn.problem.metrics import IDLE, assignment_metrics
from uavgnn.problem.scenes import Scene
from uavgnn.solvers.repair import repair_assignment

DECODERS = ("argmax", "greedy", "sample")
STAGE_ITERS = 10  # balancing rounds after a stage: the policy was balanced before it (on validation, as good as 50)
SYNC_FREE_ROUNDS = 64  # fixed-shape rounds of each greedy decode of the staged decision on a GPU (a margin over what
#                        256 UAVs need, BENCHMARKS.md; a decode left unconverged drops its partial targets)
LOOK_AHEAD = 8  # candidates a free UAV's pointer looks ahead at once for its next live one (``greedy_decode``)
CHECK_EVERY = 4  # a decision on a GPU reads back every that many rounds whether its decode converged and stops
#                  there: a round is a few dozen kernel launches, and most decodes converge long before the last


def decision_rounds(t: torch.Tensor) -> int | None:
    """How a decision's greedy decodes run where ``t`` lives: on a GPU in at most ``SYNC_FREE_ROUNDS`` fixed
    rounds (read back every ``CHECK_EVERY``: pass it as ``check_every``), on a CPU as the loop (None)."""
    return SYNC_FREE_ROUNDS if t.is_cuda else None


def _rank_within(group: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
    """Rank (0 = best) of each element by descending ``score`` within its ``group``."""
    order = torch.argsort(score, descending=True, stable=True)
    order = order[torch.argsort(group[order], stable=True)]
    sorted_group = group[order]
    start = torch.searchsorted(sorted_group, sorted_group, right=False)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order), device=group.device) - start
    return rank


def argmax_decode(
    cand_logp: torch.Tensor, idle_logp: torch.Tensor, cand_uav: torch.Tensor, cand_target_node: torch.Tensor
) -> torch.Tensor:
    """Chosen target node per node (-1 idle) by each UAV's most likely choice."""
    edge, goes = best_choice(cand_logp, idle_logp, cand_uav)
    if cand_target_node.numel() == 0:  # no candidate anywhere: everyone idles
        return torch.full_like(edge, -1)
    return torch.where(goes & (edge >= 0), cand_target_node[edge.clamp(min=0)], -1)


def greedy_decode(
    cand_logp: torch.Tensor, cand_uav: torch.Tensor, cand_target_node: torch.Tensor, need: torch.Tensor
) -> torch.Tensor:
    """Capacity-aware decoding (module docstring): chosen target node per node, -1 idle."""
    n = need.numel()  # nodes of the batch; need is 0 on UAV nodes
    c = cand_uav.numel()
    dev = cand_uav.device
    # each UAV's candidates in preference order: most likely first, ties to the higher edge index
    order = torch.arange(c - 1, -1, -1, device=dev)
    order = order[torch.argsort(cand_logp[order], descending=True, stable=True)]
    order = order[torch.argsort(cand_uav[order], stable=True)]
    nodes = torch.arange(n, device=dev)
    start = torch.searchsorted(cand_uav[order], nodes)
    end = torch.searchsorted(cand_uav[order], nodes, right=True)
    ptr = start.clone()
    possible = cand_logp > float("-inf")  # a candidate of probability 0 (padding) is never proposed
    alive = possible.clone()
    held = torch.full((n,), -1, dtype=torch.long, device=dev)  # per UAV node: its held candidate edge
    reopened = torch.zeros(n, dtype=torch.bool, device=dev)
    while True:
        free = torch.nonzero((held < 0) & (ptr < end)).squeeze(1)
        ptr[free] = _next_live(ptr[free], end[free], alive, order)
        proposers = free[ptr[free] < end[free]]
        if proposers.numel():
            proposed = order[ptr[proposers]]
            touched = torch.zeros(n, dtype=torch.bool, device=dev)
            touched[cand_target_node[proposed]] = True
            held_edges = held[held >= 0]
            held_edges = held_edges[touched[cand_target_node[held_edges]]]  # only targets with new proposals
            idx = torch.sort(torch.cat([held_edges, proposed])).values
            # each touched target keeps its `need` most likely among held and new; the rest die
            keep = _rank_within(cand_target_node[idx], cand_logp[idx]) < need[cand_target_node[idx]]
            alive[idx[~keep]] = False
            held[cand_uav[idx[~keep]]] = -1
            held[cand_uav[idx[keep]]] = idx[keep]
            continue
        # no proposals left: close targets short of their need, releasing their UAVs
        held_edges = held[held >= 0]
        count = torch.zeros(n, dtype=torch.long, device=dev).index_add(
            0, cand_target_node[held_edges], torch.ones_like(held_edges)
        )
        short = (count > 0) & (count < need)
        if not short.any():
            # repair: closed targets get one more chance with the UAVs still idle (who rescan their lists)
            retry = ~reopened & (need > 0) & (count == 0)
            busy = held >= 0
            again = ~alive & possible & retry[cand_target_node] & ~busy[cand_uav]
            if not again.any():
                break
            alive |= again
            reopened |= retry
            ptr = torch.where(busy, ptr, start)
            continue
        closing = short[cand_target_node]
        alive &= ~closing
        released = held_edges[closing[held_edges]]
        held[cand_uav[released]] = -1
    choice = torch.full((n,), -1, dtype=torch.long, device=dev)
    h = held[held >= 0]
    choice[cand_uav[h]] = cand_target_node[h]
    return choice


def _next_live(ptr: torch.Tensor, end: torch.Tensor, alive: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Each pointer moved past the candidates that died: to the next live one in its UAV's list, or its end. Looks
    ``LOOK_AHEAD`` candidates ahead of the free UAVs' pointers at once (rarely again): work in the free UAVs, not a
    pass over every candidate."""
    last, ahead = order.numel() - 1, torch.arange(LOOK_AHEAD, device=ptr.device)
    while True:
        at = ptr[:, None] + ahead
        stop = (at >= end[:, None]) | alive[order[at.clamp(max=last)]]  # the first live candidate, or the list's end
        found = stop.any(1)
        ptr = torch.where(found, torch.minimum(ptr + stop.byte().argmax(1), end), ptr + LOOK_AHEAD)
        if bool(found.all()):
            return ptr


def staged_decode(
    cand_logp: torch.Tensor,
    idle_logp: torch.Tensor,
    cand_uav: torch.Tensor,
    cand_target_node: torch.Tensor,
    need: torch.Tensor,
    balancing: Balancing,
    rounds: int | None = None,
    scene: tuple[torch.Tensor, int] | None = None,
    check_every: int = 0,
) -> torch.Tensor:
    """The model's decision target by target, the surest first (module docstring): chosen target node per node.
    With ``rounds`` (a GPU: ``decode``) every greedy decode inside is ``fixed_round_greedy``'s, that many rounds,
    over ``scene`` (each node's scene, how many), stopping early at a fixed point read back every ``check_every``
    rounds (0: never read back); a target a decode that did not converge leaves partial is dropped at the end (its
    UAVs idle), so the decision stays one a target pays for."""
    n, dev, stages = need.numel(), need.device, balancing.stages
    if rounds is None:
        decide = lambda logp: greedy_decode(logp, cand_uav, cand_target_node, need)  # noqa: E731
    else:
        decide = lambda logp: fixed_round_greedy(  # noqa: E731
            logp, cand_uav, cand_target_node, need, *scene, rounds, check_every
        )[0]
    rebalancing = replace(balancing, iters=min(balancing.iters, STAGE_ITERS))
    decided = torch.full((n,), -1, dtype=torch.long, device=dev)
    gone = torch.zeros(n, dtype=torch.bool, device=dev)  # UAVs and targets decided in an earlier stage
    for stage in range(1, stages):
        chosen = decide(cand_logp)[cand_uav] == cand_target_node
        least = cand_logp.new_ones(n).scatter_reduce(  # per target: its least sure UAV's probability
            0, cand_target_node, torch.where(chosen, cand_logp.exp(), 1.0), "amin"
        )
        count = torch.zeros(n, dtype=torch.long, device=dev).index_add(0, cand_target_node, chosen.long())
        sure = (need > 0) & (count == need) & (least >= 1 - stage / stages)
        kept = chosen & sure[cand_target_node]
        decided = decided.scatter_reduce(0, cand_uav, torch.where(kept, cand_target_node, -1), "amax")
        gone = gone | sure | (decided >= 0)
        left = cand_logp.masked_fill(gone[cand_uav] | gone[cand_target_node], float("-inf"))
        cand_logp, idle_logp = capacity_balanced(
            *choice_log_probs(left, idle_logp, cand_uav), cand_uav, cand_target_node, need, rebalancing
        )
    choice = torch.where(decided >= 0, decided, decide(cand_logp))
    return choice if rounds is None else without_partial_targets(choice, need)


def without_partial_targets(choice: torch.Tensor, need: torch.Tensor) -> torch.Tensor:
    """``choice`` with the UAVs of a target left short of its need idle: what a decode in rounds that did not
    converge may leave, made a decision every target it serves pays for."""
    target = choice.clamp(min=0)
    count = torch.zeros(need.numel(), dtype=torch.long, device=need.device).index_add(0, target, (choice >= 0).long())
    return torch.where((choice >= 0) & (count[target] < need[target]), -1, choice)


def fixed_round_greedy(
    cand_logp: torch.Tensor,
    cand_uav: torch.Tensor,
    cand_target_node: torch.Tensor,
    need: torch.Tensor,
    scene: torch.Tensor,
    n_scenes: int,
    rounds: int,
    check_every: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``greedy_decode`` as ``rounds`` rounds of fixed-shape masked tensor ops, for a training step the host
    does not wait on: (chosen target node per node (-1 idle), whether it converged (a device bool)). With
    ``check_every`` > 0 (a decision, not a captured step) the host reads every that many rounds whether the last
    round changed anything and stops there: the same result, in the launches converging takes.

    One round does what one pass of ``greedy_decode``'s loop does, with every branch computed and the one that
    applies selected on the device, scene by scene (``scene``: each node's, of ``n_scenes``; scenes share no
    candidate, so one may close while another still proposes: a quarter fewer rounds). Every free UAV proposes
    its most likely live candidate (a scatter-min over its list, not a pointer walked in a loop) and each target
    keeps its ``need`` most likely among held and proposed (a running count in each target's preference order);
    in a scene where nobody proposes, short targets close; where none is short either, closed targets reopen
    once. A round that changes nothing is a fixed point: converged
    decodes equal ``greedy_decode``'s (tested against it and a plain Python reference); an unconverged one is
    feasible (no target over-filled) but may leave a target partial.
    """
    n, c, dev = need.numel(), cand_uav.numel(), cand_uav.device
    edge = torch.arange(c, device=dev)
    by_uav = edge.flip(0)  # each UAV's candidates: most likely first, ties to the higher edge index
    by_uav = by_uav[torch.argsort(cand_logp[by_uav], descending=True, stable=True)]
    by_uav = by_uav[torch.argsort(cand_uav[by_uav], stable=True)]
    uav_rank, unranked = torch.empty_like(edge).scatter_(0, by_uav, edge), torch.full_like(edge, c)
    by_target = torch.argsort(cand_logp, descending=True, stable=True)  # ties to the lower edge index
    by_target = by_target[torch.argsort(cand_target_node[by_target], stable=True)]
    sorted_target = cand_target_node[by_target]
    first = torch.searchsorted(sorted_target, sorted_target)  # where each position's target starts
    position = torch.empty_like(edge).scatter_(0, by_target, edge)  # each edge's position in that order
    edge_need, zero = need[cand_target_node], torch.zeros(1, dtype=torch.long, device=dev)
    # the 'any of' reductions in int32 (CUDA's scatter_reduce has no bool kernel)
    no_node, none = torch.zeros(n, dtype=torch.int32, device=dev), torch.full((n,), c, dtype=torch.long, device=dev)
    possible = cand_logp > float("-inf")  # a candidate of probability 0 (padding) is never proposed
    alive, held = possible, torch.zeros(c, dtype=torch.bool, device=dev)
    closed = need > 0  # targets not reopened yet
    edge_scene, no_scene = scene[cand_uav], torch.zeros(n_scenes, dtype=torch.int32, device=dev)
    still = torch.ones((), dtype=torch.bool, device=dev)  # no round run (rounds 0): not converged
    for r in range(1, rounds + 1):
        check = r == rounds or (check_every > 0 and r % check_every == 0)
        busy = (no_node.scatter_reduce(0, cand_uav, held.int(), "amax") > 0)[cand_uav]  # per edge: its UAV holds one
        best = none.scatter_reduce(0, cand_uav, torch.where(alive & ~busy, uav_rank, unranked), "amin")
        proposed = uav_rank == best[cand_uav]  # each free UAV's most likely live candidate
        proposing_scene = no_scene.scatter_reduce(0, edge_scene, proposed.int(), "amax") > 0
        proposing, playing = proposing_scene[edge_scene], held | proposed
        ahead = torch.cat([zero, playing[by_target].cumsum(0)])  # contenders up to each position, by target
        kept = playing & ((ahead[1:] - ahead[first])[position] <= edge_need)
        count = torch.zeros(n, dtype=torch.long, device=dev).index_add_(0, cand_target_node, held.long())
        short = count * (need - count) > 0
        short_edge = short[cand_target_node]
        shorts_scene = no_scene.scatter_reduce(0, edge_scene, short_edge.int(), "amax") > 0
        quiet = ~(proposing_scene | shorts_scene)  # nothing to close
        closing = short_edge & ~proposing
        retry = closed & (count == 0) & quiet[scene]
        again = retry[cand_target_node] & possible & ~(alive | busy)
        if check:  # a round that changes nothing: the decode is at its fixed point
            still = proposing.any() | closing.any() | again.any()
        held = torch.where(proposing, kept, held & ~closing)
        alive = torch.where(proposing, alive & (kept | ~playing), (alive & ~closing) | again)
        closed = closed & ~retry
        if check and r < rounds and not bool(still):  # a host read, every check_every rounds: at a fixed point
            break
    choice = torch.full((n,), -1, dtype=torch.long, device=dev).scatter_reduce(
        0, cand_uav, torch.where(held, cand_target_node, -1), "amax"
    )
    return choice, ~still


def gumbel_noise(count: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """Standard Gumbel samples: ``argmax(logp + noise)`` is a sample of ``softmax(logp)`` (the Gumbel-max trick)."""
    uniform = torch.rand(count, generator=generator, device=device).clamp_(1e-12, 1 - 1e-12)
    return -torch.log(-torch.log(uniform))


def perturbed_greedy(
    batch: Batch,
    cand_logp: torch.Tensor,
    keep: torch.Tensor,
    samples: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    rounds: int | None = None,
) -> torch.Tensor:
    """``samples`` greedy decodes of every scene, (samples, num_nodes) chosen target nodes (-1 idle):
    row 0 on the log-probabilities themselves (the greedy decode), the others on Gumbel-perturbed ones.
    All rows run as one greedy decode of the batch replicated ``samples`` times; with ``rounds`` (a GPU) in at
    most that many fixed rounds read back every ``CHECK_EVERY``, as the staged decision's."""
    cand_uav, cand_target_node = batch.cand_index[0, keep], batch.cand_index[1, keep]
    n, c = batch.num_nodes, cand_uav.numel()
    shift = torch.arange(samples, device=cand_uav.device).repeat_interleave(c) * n
    gumbel = gumbel_noise(samples * c, generator, cand_logp.device) * temperature
    gumbel[:c] = 0.0  # row 0: the greedy decode itself, so the best of the rows is never worse than greedy
    args = (
        cand_logp.detach().repeat(samples) + gumbel,
        cand_uav.repeat(samples) + shift,
        cand_target_node.repeat(samples) + shift,
        batch.need.repeat(samples),
    )
    if rounds is None:
        choice = greedy_decode(*args).view(samples, n)
    else:  # each sample's scenes are scenes of their own
        sample = torch.arange(samples, device=cand_uav.device)[:, None] * batch.num_graphs
        scene = (batch.batch[None] + sample).reshape(-1)
        rows = fixed_round_greedy(*args, scene, samples * batch.num_graphs, rounds, CHECK_EVERY)[0]
        choice = without_partial_targets(rows, args[3]).view(samples, n)
    offsets = (torch.arange(samples, device=choice.device) * n)[:, None]
    return torch.where(choice >= 0, choice - offsets, choice)


def sample_decode(
    batch: Batch,
    cand_logp: torch.Tensor,
    keep: torch.Tensor,
    scenes: Sequence[Scene],
    samples: int = 16,
    temperature: float = 1.0,
    seed: int = 0,
    decided: torch.Tensor | None = None,
) -> list[np.ndarray]:
    """Best of ``samples`` decodes per scene (module docstring): greedy decodes of the perturbed policy, the first
    of them ``decided`` when given (the model's own decision, e.g. staged) instead of the plain greedy decode;
    ``scenes`` are the batch's, for J."""
    gen = torch.Generator(device=cand_logp.device).manual_seed(seed)
    choice = perturbed_greedy(batch, cand_logp, keep, samples, temperature, gen, decision_rounds(cand_logp))
    if decided is not None:
        choice[0] = decided
    per_sample = [split_assignments(batch, choice[s]) for s in range(samples)]
    flat = [a for sample in per_sample for a in sample]
    rewards = assignment_metrics(list(scenes) * samples, flat)["reward"].reshape(samples, len(scenes))
    best = rewards.argmax(axis=0)
    return [per_sample[best[g]][g] for g in range(len(scenes))]


def decode(
    method: str,
    batch: Batch,
    cand_logp: torch.Tensor,
    idle_logp: torch.Tensor,
    keep: torch.Tensor,
    scenes: Sequence[Scene] | None = None,
    samples: int = 16,
    repair: bool = False,
    balancing: Balancing = Balancing(),
) -> list[np.ndarray]:
    """Assignments (target index per UAV, -1 idle) of every scene in ``batch``; ``sample`` and ``repair``
    need the batch's ``scenes``; ``balancing``: the model's (its ``stages`` make ``greedy`` staged)."""
    if (method == "sample" or repair) and scenes is None:
        raise ValueError(f"decoder={method} with repair={repair} needs the batch's scenes")
    assignments = _decode(method, batch, cand_logp, idle_logp, keep, scenes, samples, balancing)
    return [repair_assignment(s, a) for s, a in zip(scenes, assignments)] if repair else assignments


def _decode(
    method: str,
    batch: Batch,
    cand_logp: torch.Tensor,
    idle_logp: torch.Tensor,
    keep: torch.Tensor,
    scenes: Sequence[Scene] | None,
    samples: int,
    balancing: Balancing,
) -> list[np.ndarray]:
    cand_uav, cand_target_node = batch.cand_index[0, keep], batch.cand_index[1, keep]
    if method == "argmax":
        choice = argmax_decode(cand_logp, idle_logp, cand_uav, cand_target_node)
    elif method in ("greedy", "sample"):
        choice = staged_decode(
            cand_logp,
            idle_logp,
            cand_uav,
            cand_target_node,
            batch.need,
            balancing,
            decision_rounds(cand_logp),
            (batch.batch, batch.num_graphs),
            CHECK_EVERY,
        )
        if method == "sample":
            return sample_decode(batch, cand_logp, keep, scenes, samples, decided=choice)
    else:
        raise ValueError(f"decoder: unknown decoder {method!r} (expected one of {', '.join(DECODERS)})")
    return split_assignments(batch, choice)


def split_assignments(batch: Batch, choice: torch.Tensor) -> list[np.ndarray]:
    """Per-scene arrays from a per-node choice of target *node* (-1 idle)."""
    ptr = batch.ptr.cpu()
    n_uav = batch.n_uav.cpu()
    graph_of = batch.batch
    local = (
        torch.where(
            choice >= 0,
            choice - batch.ptr[graph_of[choice.clamp(min=0)]] - batch.n_uav[graph_of[choice.clamp(min=0)]],
            torch.full_like(choice, IDLE),
        )
        .cpu()
        .numpy()
    )
    return [local[int(ptr[g]) : int(ptr[g]) + int(n_uav[g])] for g in range(len(n_uav))]
