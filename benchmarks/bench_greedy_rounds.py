"""How many rounds REINFORCE's sync-free greedy baseline needs (``optim.sync_free``, ``algorithm.greedy_rounds``),
what a round costs, and whether its converged decodes are the loop decoder's.

    .venv/bin/python benchmarks/bench_greedy_rounds.py                       # CPU
    .venv/bin/python benchmarks/bench_greedy_rounds.py --device cuda         # a GPU: times too

Fresh scenes of 8 to 256 UAVs, their candidates at k = 8, random scores at three spreads (rounded at the
middle one: many ties). For each: the fewest rounds at which ``fixed_round_greedy`` reports convergence, whether
its assignment then equals ``greedy_decode``'s, the aten ops of one round (each a kernel launch on a GPU) and the
host-sync ops of each decoder, and median times of the loop decoder and of 48 fixed rounds.
"""

from __future__ import annotations

import argparse

import torch

from uavgnn.inference.decoders import fixed_round_greedy, greedy_decode
from uavgnn.infrastructure.perf import OpCounter, median_seconds
from uavgnn.models.choices import choice_log_probs
from uavgnn.problem.graphs import build_graph_batch
from uavgnn.problem.scene_batch import SceneDistribution, generate_scene_batch
from uavgnn.reporting.tables import format_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device, gen = torch.device(args.device), torch.Generator(args.device).manual_seed(0)
    rows = []
    for n_uav, scenes in ((8, 64), (16, 64), (64, 16), (256, 4)):
        batch = build_graph_batch(generate_scene_batch(SceneDistribution(), n_uav, scenes, gen, device), 16, 8)
        keep = (batch.cand_rank < 8) & batch.cand_valid  # the real candidates (not the padding slots)
        uav, target = batch.cand_index[0, keep], batch.cand_index[1, keep]
        for spread, ties in ((0.3, False), (1.0, True), (4.0, False)):
            logits = torch.randn(uav.numel(), generator=gen, device=device) * spread
            logits = logits.round() if ties else logits
            logp, _ = choice_log_probs(logits, torch.zeros(batch.num_nodes, device=device), uav)
            exact = greedy_decode(logp, uav, target, batch.need)

            def fixed(rounds: int) -> tuple[torch.Tensor, torch.Tensor]:
                return fixed_round_greedy(logp, uav, target, batch.need, batch.batch, batch.num_graphs, rounds)

            needed = next(r for r in range(1, 200) if bool(fixed(r)[1]))
            counts = []
            for rounds in (10, 11, 48):
                with OpCounter() as count:
                    fixed(rounds)
                counts.append(count)
            with OpCounter() as loop:
                greedy_decode(logp, uav, target, batch.need)
            rows.append(
                {
                    "UAVs": n_uav,
                    "scenes": scenes,
                    "scores": f"x{spread}{' rounded' if ties else ''}",
                    "rounds needed": needed,
                    "equals loop": bool(torch.equal(fixed(needed)[0], exact)),
                    "ops/round": counts[1].ops - counts[0].ops,
                    "syncs (48 rounds)": counts[2].syncs,
                    "loop ops": loop.ops,
                    "loop syncs": loop.syncs,
                    "loop ms": round(
                        1000
                        * median_seconds(lambda: greedy_decode(logp, uav, target, batch.need), 5, device, warmup=0),
                        2,
                    ),
                    "48 rounds ms": round(1000 * median_seconds(lambda: fixed(48), 5, device, warmup=0), 2),
                }
            )
    print(format_table(rows))


if __name__ == "__main__":
    main()
