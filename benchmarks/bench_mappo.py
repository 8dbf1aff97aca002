"""What one MAPPO update costs as the swarm grows: aten ops (each a kernel launch on a GPU) and time, for the
shared MLP actor with agent ids, for the graph actor, and for the graph actor scoring goto actions target by target
(``algorithm.target_scores``, as ``experiment=swarm_disrupted``), on the same episodes.

    .venv/bin/python benchmarks/bench_mappo.py --agents 2 4 16 64
    python benchmarks/bench_mappo.py --agents 2 4 16 64 --device cuda          # on a GPU machine

One update = ``mappo_loss``, backward and an Adam step over actor and critic, on ``--episodes`` episodes of
``--steps`` steps with observations and states sized by the default environment of N UAVs (continuous
actions; goto actions for the target scores). Ops: the second update counted; times: medians of ``--repeats``
after warm-up.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from bench_masac import median_time, ops_per_update

from uavgnn.algorithms.mappo import MAPPOAgents, MAPPOSettings, mappo_loss
from uavgnn.algorithms.mappo_rollouts import Rollouts
from uavgnn.envs.settings import N_DISCRETE, EnvSettings
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.reporting.tables import format_table

ACTORS = ("mlp", "graph", "target scores")


def update(n: int, b: int, t: int, actor: str, device: torch.device) -> Callable[[], None]:
    """One MAPPO update of agents for ``n`` UAVs on random episodes of the default environment's sizes."""
    graph, goto = actor != "mlp", actor == "target scores"
    env = EnvSettings(n_uav=n, action="goto" if goto else "continuous")
    obs_dim, state_dim, n_actions = env.obs_dim(), env.state_dim(SceneDistribution()), env.action_dim()
    agents = MAPPOAgents(
        MAPPOSettings(
            n,
            obs_dim,
            state_dim,
            n_actions,
            not goto,
            32 if graph else 128,
            1 if graph else 2,
            128,
            2,
            0.99,
            (env.layout(), 1, 2) if graph else None,
            target_scores=goto,
        )
    )
    agents = agents.to(device)
    g = torch.Generator().manual_seed(0)
    rand = lambda *shape: torch.randn(*shape, generator=g).to(device)  # noqa: E731
    batch = Rollouts(
        rand(b, t, n, obs_dim),
        rand(b, t, state_dim),
        torch.ones(b, t, n, n_actions if goto else N_DISCRETE, dtype=torch.bool, device=device),
        torch.randint(n_actions, (b, t, n), generator=g).to(device) if goto else rand(b, t, n, 2),
        rand(b, t, n),
        torch.zeros(b, t, device=device),
        torch.ones(b, t, device=device),
        rand(b, t, n) - 3.0,
        rand(b, t, n),
        rand(b, t, n),
        rand(b, t, n),
    )
    optimizer = torch.optim.Adam(agents.parameters(), 5e-4)

    def step() -> None:
        loss, _ = mappo_loss(agents, batch, 0.2, 0.01)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if device.type == "cuda":  # the time of the work, not of queueing it
            torch.cuda.synchronize()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, nargs="+", default=[2, 4, 16, 64])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    rows = []
    for n in args.agents:
        row: dict[str, object] = {"agents": n}
        for actor in ACTORS:
            row[f"{actor} ops"] = ops_per_update(update(n, args.episodes, args.steps, actor, torch.device("cpu")))
            row[f"{actor} ms"] = round(
                1000 * median_time(update(n, args.episodes, args.steps, actor, device), args.repeats), 1
            )
        rows.append(row)
    print(
        f"MAPPO update (loss, backward, Adam), {args.episodes} episodes x {args.steps} steps, device {device}, "
        f"threads {torch.get_num_threads()}, medians of {args.repeats}"
    )
    print(format_table(rows))


if __name__ == "__main__":
    main()
