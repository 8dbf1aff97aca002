"""Probe for issue 33's coordinating decoder: does feeding the current greedy decode back into the model
(iterative refinement) recover the gap the model loses at scale? Not a feature yet: a measurement to decide on.

    .venv/bin/python benchmarks/probe_refinement.py --steps 1500 --rounds 0     # plain imitation
    .venv/bin/python benchmarks/probe_refinement.py --steps 1500 --rounds 1     # one refinement round

Both arms train the `small` TransformerGNN from scratch by imitation of the MILP labels of the dev preset's 4,000
cached 16-UAV scenes (batch 64, k = 8, AdamW 3e-3, warmup 50, cosine; no moving average, one thread). With
``--rounds R`` the model also gets three assignment features per node, added to its node embeddings through a
zero-initialised linear map (UAV: busy, its target complete, 1; target: UAVs sent / need, complete, 1), and the
loss adds the NLL of the labels at each of R rounds whose features come from the previous round's greedy decode
(detached). Scored: the greedy decode after 0, R and 2R rounds on the uniform test sets of 16, 256 and 1,024 UAVs
(the cache of ``--cache``; built with their MILP labels if missing), gap against the proven-optimal MILP.
"""

from __future__ import annotations

import argparse
import math

import torch
from omegaconf import open_dict
from torch import nn

from uavgnn.algorithms import default_config
from uavgnn.data.loader import InMemoryLoader
from uavgnn.data.splits import load_split
from uavgnn.decoders import greedy_decode, split_assignments
from uavgnn.models.choices import imitation_loss
from uavgnn.models.policy import policy_log_probs
from uavgnn.models.transformer_gnn import TransformerGNN
from uavgnn.problem.graphs import adaptive_k, with_budget
from uavgnn.problem.metrics import assignment_metrics, mean_metrics


def with_assignment_input(model: TransformerGNN) -> nn.Linear:
    """A zero-initialised map of ``model.assignment`` (set before each call; None: off) into both node encoders'
    outputs: the node embeddings then see the current assignment."""
    refine = nn.Linear(3, model.idle_scorer[0].in_features)
    nn.init.zeros_(refine.weight)
    nn.init.zeros_(refine.bias)
    model.assignment = None
    for encoder in (model.uav_encoder, model.target_encoder):
        encoder.register_forward_hook(lambda _m, _i, out: out if model.assignment is None
                                      else out + refine(model.assignment))
    return refine


def assignment_features(batch, choice: torch.Tensor) -> torch.Tensor:
    """(num_nodes, 3) of a choice of target node per node (-1 idle), see the module docstring."""
    is_target = batch.need > 0
    count = torch.zeros(choice.numel()).index_add_(0, choice.clamp(min=0), (choice >= 0).float())
    complete = is_target & (count >= batch.need)
    fill = torch.where(is_target, count / batch.need.clamp(min=1), (choice >= 0).float())
    done = torch.where(is_target, complete, (choice >= 0) & complete[choice.clamp(min=0)])
    return torch.stack([fill, done.float(), torch.ones_like(fill)], 1)


def refined(model: TransformerGNN, batch, k: int, rounds: int, labels: bool = False):
    """The greedy decode after ``rounds`` refinements; with ``labels``, also the summed NLL of every round."""
    model.assignment, loss = None, 0.0
    for _ in range(rounds + 1):
        cand_logp, idle_logp, keep = policy_log_probs(model, batch, k)
        cand_uav = batch.cand_index[0, keep]
        if labels:
            loss = loss + imitation_loss(cand_logp, idle_logp, cand_uav, batch.cand_label[keep], batch.busy,
                                         batch.node_type == 0)[0]
        choice = greedy_decode(cand_logp.detach(), cand_uav, batch.cand_index[1, keep], batch.need)
        model.assignment = assignment_features(batch, choice)
    model.assignment = None
    return choice, loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--cache", default=".cache/uavgnn")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = default_config("imitation")
    with open_dict(cfg):
        cfg.data.cache_dir, cfg.data.label_time_limit = args.cache, 60.0
    model = TransformerGNN(64, 2, 2)
    extra = list(with_assignment_input(model).parameters()) if args.rounds else []
    optimiser = torch.optim.AdamW(list(model.parameters()) + extra, lr=3e-3, weight_decay=1e-4)
    step = 0
    while step < args.steps:
        for batch in InMemoryLoader(load_split(cfg, "train"), 64, shuffle=True, seed=step, drop_last=True):
            if step == args.steps:
                break
            factor = min(1.0, (step + 1) / 50) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
            for group in optimiser.param_groups:
                group["lr"] = 3e-3 * factor
            _, loss = refined(model, with_budget(batch, 8), 8, args.rounds, labels=True)
            optimiser.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
            step += 1
    model.eval()
    for n_uav, scenes in ((16, 256), (256, 32), (1024, 8)):
        store, k = load_split(cfg, "test", n_uav=n_uav, count=scenes), adaptive_k(n_uav, 8, 4, 16)
        gaps = []
        for rounds in sorted({0, args.rounds, 2 * args.rounds}):
            assignments = []
            with torch.no_grad():
                for batch in InMemoryLoader(store, 64, shuffle=False):
                    assignments += split_assignments(batch, refined(model, with_budget(batch, k), k, rounds)[0])
            metrics = mean_metrics(assignment_metrics(store.scenes(), assignments, store.objective.numpy()))
            gaps.append(f"{rounds} rounds {100 * metrics['optimality_gap']:.2f}% "
                        f"(completion {metrics['completion_score']:.3f})")
        print(f"{n_uav} UAVs: " + ", ".join(gaps), flush=True)


if __name__ == "__main__":
    main()
