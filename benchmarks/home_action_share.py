"""How often a goto policy with the home action (``env.goto_home``) takes it, per test world: among its UAVs with
range, and among those the central planner would leave idle (where the rule "idle UAVs home" sends them). Tells
whether a policy trained on several worlds learned where going home pays (BENCHMARKS.md, "Swarm scale").

    .venv/bin/python benchmarks/home_action_share.py outputs/swarm64/rest35_s1/best.pt outputs/swarm64/one35_s1/best.pt
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from uavgnn.algorithms.env_policy import load_env_policy
from uavgnn.envs.disruptions import TEST_SETS
from uavgnn.envs.policies import scripted_planner
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.modes.evaluate_env import NOMINAL
from uavgnn.settings import env_settings, scene_distribution

WORLDS = {"nominal": {}, "moving_targets": TEST_SETS["moving_targets"], "late_targets": TEST_SETS["late_targets"]}


def home_shares(checkpoint: str, episodes: int, seed: int) -> dict[str, tuple[float, float]]:
    """Per world: (share of the live UAV-steps going home, share of the planner-idle ones going home)."""
    policy, config = load_env_policy(checkpoint, "home_action_share")
    trained = env_settings(config)
    shares = {}
    for world, change in WORLDS.items():
        settings = dataclasses.replace(trained, **{**NOMINAL, **change})
        env = UAVEnv(settings, scene_distribution(config), episodes, torch.device("cpu"), seed=seed)
        counts = torch.zeros(4)  # live, live going home, planner-idle, planner-idle going home
        with torch.no_grad():
            for _ in range(settings.horizon):
                action, live = policy(env), env.energy > 0
                home, idle = (action == settings.home_action()) & live, (scripted_planner(env) == 0) & live
                counts += torch.stack([live.sum(), home.sum(), idle.sum(), (home & idle).sum()]).float()
                env.step(action)
        shares[world] = (float(counts[1] / counts[0]), float(counts[3] / counts[2].clamp(min=1)))
    return shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for checkpoint in args.checkpoints:
        shares = home_shares(checkpoint, args.episodes, args.seed)
        said = "; ".join(
            f"{w}: home {a:.1%} of live steps, {b:.1%} where the planner idles" for w, (a, b) in shares.items()
        )
        print(f"{checkpoint}: {said}")


if __name__ == "__main__":
    main()
