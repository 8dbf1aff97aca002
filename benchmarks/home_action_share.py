"""How often a goto policy with the home action (``env.goto_home``) takes it, per test world and swarm size: among
its UAVs with range, and among those the central planner would leave idle (where the rule "idle UAVs home" sends
them); and how many candidate targets those idle UAVs see. Tells whether a policy trained on several worlds learned
where going home pays, and whether it still does zero-shot in a larger swarm (BENCHMARKS.md, "Swarm scale").

    .venv/bin/python benchmarks/home_action_share.py outputs/swarm64/rest35_s1/best.pt outputs/swarm64/one35_s1/best.pt
    .venv/bin/python benchmarks/home_action_share.py outputs/swarm64/one35v_s0/best.pt --sizes 16 256
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from uavgnn.algorithms.env_policy import load_env_policy
from uavgnn.config.settings import env_settings, scene_distribution
from uavgnn.envs.disruptions import TEST_SETS
from uavgnn.envs.policies import scripted_planner
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.evaluation.environment import NOMINAL

WORLDS = {"nominal": {}, "moving_targets": TEST_SETS["moving_targets"], "late_targets": TEST_SETS["late_targets"]}


def home_shares(checkpoint: str, episodes: int, seed: int, n_uav: int | None) -> dict[str, tuple[float, ...]]:
    """Per world, at ``n_uav`` UAVs (None: the trained size; ``episodes`` at the trained size, as many UAVs at
    another): (share of the live UAV-steps going home, share of the planner-idle ones going home, candidate targets
    a planner-idle UAV sees)."""
    policy, config = load_env_policy(checkpoint, "home_action_share")
    trained = env_settings(config)
    shares = {}
    for world, change in WORLDS.items():
        settings = dataclasses.replace(trained, **{**NOMINAL, **change, "n_uav": n_uav or trained.n_uav})
        n_envs = max(1, episodes * trained.n_uav // settings.n_uav)
        env = UAVEnv(settings, scene_distribution(config), n_envs, torch.device("cpu"), seed=seed)
        counts = torch.zeros(5)  # live, live going home, planner-idle, planner-idle going home, their candidates
        with torch.no_grad():
            for _ in range(settings.horizon):
                action, live, seen = policy(env), env.energy > 0, env.candidates()[2].sum(-1)
                home, idle = (action == settings.home_action()) & live, (scripted_planner(env) == 0) & live
                counts += torch.stack([live.sum(), home.sum(), idle.sum(), (home & idle).sum(), seen[idle].sum()])
                env.step(action)
        idle_steps = counts[2].clamp(min=1)
        shares[world] = (float(counts[1] / counts[0]), float(counts[3] / idle_steps), float(counts[4] / idle_steps))
    return shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--sizes", type=int, nargs="*", default=[], help="swarm sizes (default: the trained one)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for checkpoint in args.checkpoints:
        for n_uav in args.sizes or [None]:
            shares = home_shares(checkpoint, args.episodes, args.seed, n_uav)
            said = "; ".join(
                f"{w}: home {a:.1%} of live steps, {b:.1%} where the planner idles (seeing {c:.1f} targets)"
                for w, (a, b, c) in shares.items()
            )
            print(f"{checkpoint} ({n_uav or 'trained'} UAVs): {said}")


if __name__ == "__main__":
    main()
