"""Iterative refinement, the coordinating decoder: the model decides again, seeing what the last round decided.

A UAV's choice is a softmax of its own, so in one pass two UAVs may both skip a target each would complete
with the other (or both take one that needs only one). A model built with ``refine_rounds`` R reads an
assignment as node features (``assignment_features``: how full each target is, whether it is complete, whether
a UAV's target is), and this runs it R + 1 times: round 0 without an assignment, round r on the greedy decode of
round r - 1. The last round's policy is the model's: every decoder and the guided MILP use it. Imitation and
REINFORCE (each round against its own greedy rollout) train every round, so each learns to correct the one before.
The rounds are in the model, not a repair pass: the row stays purely learned.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.data import Batch

from uavgnn.inference.decoders import CHECK_EVERY, decision_rounds, fixed_round_greedy, greedy_decode
from uavgnn.infrastructure.device import unwrap
from uavgnn.models.policy import graph_log_probs, message_graph, reads_relaxation
from uavgnn.problem.graphs import assignment_features

Policy = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # candidate and idle log-probabilities, kept candidates


def policy_rounds(
    model: nn.Module,
    batch: Batch,
    k: int,
    rounds: int | None = None,
    max_edges: int | None = None,
    dense_max_nodes: int = 0,
    greedy_rounds: int | None = None,
    grad_every_round: bool = True,
    check_every: int = 0,
) -> list[Policy]:
    """The policy (``models.policy.policy_log_probs``) of every round, the first unrefined; ``rounds``: the
    refinements to run (None: the model's own ``refine_rounds``; 0 gives the one plain pass). Between rounds the
    assignment is the greedy decode, by ``greedy_decode``'s loop or, with ``greedy_rounds``, in that many
    fixed-shape rounds (``fixed_round_greedy``: no host sync; with ``check_every``, a read every that many rounds
    to stop at the fixed point). Without ``grad_every_round`` only the last round
    records gradients. The rounds share one ``MessageGraph``: the edges are assembled once."""
    rounds = getattr(unwrap(model), "refine_rounds", 0) if rounds is None else rounds
    policies: list[Policy] = []
    graph = message_graph(batch, k, dense_max_nodes, reads_relaxation(model))  # the rounds share the message graph
    assignment = None
    for r in range(rounds + 1):
        with torch.set_grad_enabled(torch.is_grad_enabled() and (grad_every_round or r == rounds)):
            policies.append(graph_log_probs(model, batch, graph, max_edges, assignment))
        if r < rounds:
            cand_logp, _, keep = policies[-1]
            assignment = round_assignment(batch, cand_logp, batch.cand_index[:, keep], greedy_rounds, check_every)
    return policies


def round_assignment(
    batch: Batch,
    cand_logp: torch.Tensor,
    cand_index: torch.Tensor,
    greedy_rounds: int | None = None,
    check_every: int = 0,
) -> torch.Tensor:
    """The next round's input (``assignment_features``): the greedy decode of a round's policy over the candidates
    ``cand_index`` (UAV node, target node), by ``greedy_decode``'s loop or in ``greedy_rounds`` fixed-shape rounds
    (``policy_rounds``)."""
    cand_logp = cand_logp.detach().float()
    if greedy_rounds is None:
        choice = greedy_decode(cand_logp, cand_index[0], cand_index[1], batch.need)
    else:
        scenes = (batch.batch, batch.num_graphs)
        choice = fixed_round_greedy(cand_logp, *cand_index, batch.need, *scenes, greedy_rounds, check_every)[0]
    return assignment_features(batch.need, choice)


def refined_log_probs(
    model: nn.Module,
    batch: Batch,
    k: int,
    max_edges: int | None = None,
    dense_max_nodes: int = 0,
    greedy_rounds: int | None = None,
    rounds: int | None = None,
) -> Policy:
    """The last round's policy (``policy_rounds``), earlier rounds without gradients: what the model decides.
    Without ``greedy_rounds`` the decodes between rounds run as a decision's do where the batch lives (on a GPU
    in fixed rounds read back every ``CHECK_EVERY``: ``decision_rounds``)."""
    check_every = CHECK_EVERY if greedy_rounds is None else 0
    greedy_rounds = decision_rounds(batch.need) if greedy_rounds is None else greedy_rounds
    return policy_rounds(
        model,
        batch,
        k,
        rounds,
        max_edges,
        dense_max_nodes,
        greedy_rounds,
        grad_every_round=False,
        check_every=check_every,
    )[-1]
