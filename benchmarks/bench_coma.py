"""COMA update speed: the batched update (``COMAAgents``) vs the per-agent, per-step loops (``coma_naive``),
side by side in one process on the same episodes.

    .venv/bin/python benchmarks/bench_coma.py                       # 4 and 16 agents, the guide's batch
    .venv/bin/python benchmarks/bench_coma.py --agents 4 16 64 --repeats 7
    python benchmarks/bench_coma.py --device cuda --agents 4 16 64             # on a GPU machine
    .venv/bin/python benchmarks/bench_coma.py --ops --agents 2 4 16 64         # aten ops per update instead

One update = loss, backward and an Adam step over actor and critic, on a
batch of ``--episodes`` episodes of ``--steps`` steps (the guide: 128 x 14) with
observations and states sized by the discrete environment of N UAVs. Medians
of ``--repeats`` after warm-up; the ratio is naive time / batched time. ``--ops``: the aten ops of one update
instead (``bench_masac.py``'s ops section explains them), on 16 episodes and hidden 32 (sizes do not change it).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import torch
from bench_masac import median_time, ops_per_update, print_ops

from uavgnn.algorithms.coma import COMAAgents, COMASettings, coma_loss
from uavgnn.algorithms.coma_naive import naive_loss
from uavgnn.envs.on_policy import Episodes
from uavgnn.envs.settings import N_DISCRETE, EnvSettings
from uavgnn.problem.scenes import SceneDistribution


def episodes(n: int, b: int, t: int, s: COMASettings) -> Episodes:
    g = torch.Generator().manual_seed(0)
    avail = torch.ones(b, t, n, N_DISCRETE, dtype=torch.bool)
    done = torch.zeros(b, t)
    done[:, -1] = 1
    return Episodes(
        torch.randn(b, t, n, s.obs_dim, generator=g),
        torch.randn(b, t, s.state_dim, generator=g),
        avail,
        torch.randint(0, N_DISCRETE, (b, t, n), generator=g),
        torch.randn(b, t, n, generator=g),
        done,
        torch.ones(b, t),
    )


def updates(n: int, b: int, t: int, hidden: int, device: torch.device) -> tuple[Callable[[], None], Callable[[], None]]:
    """The batched and the naive update of the same agents on the same episodes."""
    env = EnvSettings(n_uav=n, action="discrete")
    s = COMASettings(
        n, env.obs_dim(), env.state_dim(SceneDistribution()), N_DISCRETE, hidden, 2, hidden, 2, 0.99, 0.8, 0.001
    )
    agents = COMAAgents(s).to(device)
    batch = Episodes(*(x.to(device) for x in episodes(n, b, t, s).state_dict().values()))
    optimizer = torch.optim.Adam([p for p in agents.parameters() if p.requires_grad], 3e-4)

    def step(loss_of) -> None:
        loss, _ = loss_of(agents, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if device.type == "cuda":  # the time of the work, not of queueing it
            torch.cuda.synchronize()

    return lambda: step(coma_loss), lambda: step(naive_loss)


def update_time(n: int, b: int, t: int, hidden: int, repeats: int, device: torch.device) -> dict[str, float]:
    batched_update, naive_update = updates(n, b, t, hidden, device)
    batched, naive = median_time(batched_update, repeats), median_time(naive_update, repeats)
    return {"agents": n, "batched_ms": 1000 * batched, "naive_ms": 1000 * naive, "ratio": naive / batched}


def update_ops(n: int, t: int) -> dict[str, float]:
    batched_update, naive_update = updates(n, 16, t, 32, torch.device("cpu"))
    batched, naive = ops_per_update(batched_update), ops_per_update(naive_update)
    return {"agents": n, "batched_ops": batched, "naive_ops": naive, "ratio": naive / batched}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--ops", action="store_true", help="count aten ops per update instead of timing")
    args = parser.parse_args()
    if args.ops:
        print(f"COMA aten ops per update (loss, backward, Adam step), episodes of {args.steps} steps")
        print_ops([update_ops(n, args.steps) for n in args.agents])
        return
    print(
        f"device {args.device}, threads {torch.get_num_threads()}, batch {args.episodes} episodes x {args.steps} "
        f"steps, hidden {args.hidden}, medians of {args.repeats}"
    )
    for n in args.agents:
        print(
            json.dumps(update_time(n, args.episodes, args.steps, args.hidden, args.repeats, torch.device(args.device)))
        )


if __name__ == "__main__":
    main()
