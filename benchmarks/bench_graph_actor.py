"""The MARL graph actor's dense attention against PyG's sparse ``TransformerConv`` on the same edges.

    .venv/bin/python benchmarks/bench_graph_actor.py                  # CPU
    .venv/bin/python benchmarks/bench_graph_actor.py --device cuda    # a GPU

Every UAV's observation graph has the same 1 + obs_targets + obs_uavs nodes, so ``GraphActor`` runs attention as
batched matmuls over them, its last layer for the UAV's node alone (the one it reads). Here, for the star graph
with one layer (``experiment=swarm_disrupted``) and the linked graph with two (``env.obs_links=true
model.layers=2``), on a training minibatch (16 episodes x 40 steps x 16 UAVs) and a 256-UAV collection step (32
episodes): the median time of a forward + backward of the actor, its aten ops (those that are views launch no
kernel) and host-sync ops, its graph's build included; beside it the same weights as PyG layers on the edge list
of what each UAV sees (their graph built outside the timing and the count). That the two agree is tested
(``tests/algorithms/test_masac.py::test_the_graph_actor_equals_pyg_layers_on_what_each_uav_sees``, fp64, 1e-10).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.infrastructure.perf import OpCounter, median_seconds
from uavgnn.models.graph_actor import GraphActor
from uavgnn.problem.observation import observation_graph
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.reporting.tables import format_table


def pyg_step(actor: GraphActor, obs: torch.Tensor) -> Callable[[], None]:
    """The actor's forward + backward as PyG layers on the graph's node features and edge list (built here, not
    timed: the PyG column is the layers and the head alone)."""
    graph = observation_graph(obs, actor.layout)
    rows, nodes, _ = graph.x.shape
    row, receiver, sender = graph.mask.nonzero().T
    edge_index = torch.stack([row * nodes + sender, row * nodes + receiver])
    edge_attr, x = graph.attr[row, receiver, sender], graph.x.reshape(rows * nodes, -1)

    def step() -> None:
        h = actor.encode(x)
        for layer in actor.layers:
            h = layer(h, edge_index, edge_attr)
        actor.head(actor.norm(h.view(rows, nodes, -1)[:, 0])).sum().backward()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    device = torch.device(args.device)
    rows = []
    for graph, links, layers in (("star", False, 1), ("linked", True, 2)):
        for name, episodes, uavs, steps in (("training minibatch", 16, 16, 40), ("256-UAV step", 32, 256, 1)):
            settings = EnvSettings(
                n_uav=uavs, action="goto", goto_home=True, obs_target_velocity=True, target_speed=0.26, obs_links=links
            )
            env = UAVEnv(settings, SceneDistribution(), episodes, device, seed=0)
            obs = env.reset()[0].expand(steps, -1, -1, -1)  # (steps, E, N, obs_dim): rows as in the update
            torch.manual_seed(0)
            actor = GraphActor(settings.layout(), settings.obs_targets + 2, 32, 1, layers, 2).to(device)
            row = {"graph, layers": f"{graph}, {layers}", "batch": name, "rows": obs[..., 0].numel()}
            for path, step in (("PyG", pyg_step(actor, obs)), ("dense", lambda: actor(obs).sum().backward())):
                row[f"{path} ms"] = round(1e3 * median_seconds(step, args.repeats, device), 1)
                with OpCounter() as count:
                    step()
                row[f"{path} ops (views), syncs"] = f"{count.ops} ({count.views}), {count.syncs}"
            rows.append(row)
    print(format_table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
