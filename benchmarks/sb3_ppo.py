"""An outside library's PPO on our environment beside our MAPPO: Stable-Baselines3's PPO with parameter sharing
(every UAV one slot of ``uavgnn.envs.sb3_vec_env.UAVVecEnv``) trained on the environment a uavgnn config names
(``experiment=mappo`` by default) for the same environment steps, collections and minibatches as our MAPPO there;
with ``--ours``, our MAPPO trained with the same seed in the same process; every policy then scored greedily on
the run's test episodes (``env.val_episodes`` from ``TEST_SEED``: the scenes of our runs' own test tables) beside
the scripted planner, nearest targets and random actions, in one table.

    .venv/bin/python benchmarks/sb3_ppo.py --seeds 0 1 2 --ours --out outputs/sb3-ppo          # ~20 min a seed
    .venv/bin/python benchmarks/sb3_ppo.py --seeds 0 -- experiment=mappo train.steps=2000       # a shorter run

SB3's PPO gets our MAPPO's settings where the two share one (learning rate and its cosine decay, discount, GAE's
lambda, clip, entropy weight, gradient-norm clip, passes, minibatch size, actor width and depth, critic width and
depth, ReLU) and SB3's own defaults elsewhere (one Adam for actor and critic, value loss weight 0.5, advantages
normalised per minibatch). What it lacks of our MAPPO, by design of a single-agent library: the centralised
critic (its critic sees the UAV's own observation), the mask of absent goto targets (flying at one hovers), the
agent id and value normalisation.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from stable_baselines3 import PPO

from uavgnn.api import load_env_policy, train
from uavgnn.config.settings import env_settings, scene_distribution
from uavgnn.envs.sb3_vec_env import UAVVecEnv, shared_policy
from uavgnn.evaluation.episodes import compare_policies
from uavgnn.infrastructure.storage import write_json
from uavgnn.program.from_python import compose_config
from uavgnn.reporting.tables import format_table

OURS, THEIRS = "MAPPO (uavgnn)", "PPO, shared (SB3)"


def sb3_ppo(cfg: Any, seed: int) -> PPO:
    """SB3's PPO configured as our MAPPO is by ``cfg`` (see the module's docstring), not trained yet."""
    settings, alg, train_cfg = env_settings(cfg), cfg.algorithm, cfg.train
    episodes = cfg.hardware.batch_size * alg.minibatches  # one collection, as ours
    venv = UAVVecEnv(settings, scene_distribution(cfg), n_envs=episodes, seed=seed)
    lr = float(train_cfg.lr)
    return PPO(
        "MlpPolicy",
        venv,
        learning_rate=lambda remaining: lr * 0.5 * (1 + math.cos(math.pi * (1 - remaining))),  # cosine, as ours
        n_steps=settings.horizon,
        batch_size=cfg.hardware.batch_size * settings.horizon * settings.n_uav,
        n_epochs=alg.data_passes,
        gamma=alg.gamma,
        gae_lambda=alg.gae_lambda,
        clip_range=alg.clip,
        ent_coef=alg.entropy_coef,
        max_grad_norm=train_cfg.grad_clip,
        policy_kwargs={
            "net_arch": {"pi": [cfg.model.hidden] * cfg.model.layers, "vf": [alg.critic_hidden] * alg.critic_layers},
            "activation_fn": torch.nn.ReLU,
        },
        seed=seed,
        device="cpu",
    )


def environment_steps(cfg: Any) -> int:
    """Our MAPPO's environment steps under ``cfg``: its collections times their episodes times the horizon."""
    alg = cfg.algorithm
    collections = math.ceil(cfg.train.steps / (alg.minibatches * alg.data_passes))
    return collections * cfg.hardware.batch_size * alg.minibatches * cfg.env.horizon


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--ours", action="store_true", help="train our MAPPO with each seed too, in this process")
    parser.add_argument("--out", type=Path, default=Path("outputs/sb3-ppo"), help="runs and results.json go here")
    parser.add_argument("overrides", nargs="*", default=["experiment=mappo"], help="the uavgnn config (after --)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = compose_config(args.overrides)
    settings, dist = env_settings(cfg), scene_distribution(cfg)
    steps = environment_steps(cfg)
    print(f"{' '.join(args.overrides)}: {steps:,} environment steps a run, {cfg.env.val_episodes:,} test episodes")
    results: list[dict[str, Any]] = []
    for seed in args.seeds:
        policies, seconds = {}, {}
        start = time.perf_counter()
        model = sb3_ppo(cfg, seed)
        model.learn(steps * settings.n_uav)  # SB3 counts slot steps: one per UAV per environment step
        seconds[THEIRS] = time.perf_counter() - start
        args.out.mkdir(parents=True, exist_ok=True)
        model.save(args.out / f"sb3_ppo_s{seed}")
        policies[THEIRS] = shared_policy(model)
        if args.ours:
            start = time.perf_counter()
            run = train(
                [*args.overrides, f"seed={seed}", "logger=jsonl", "hardware.threads=1"], args.out / f"mappo_s{seed}"
            )
            seconds[OURS] = time.perf_counter() - start
            policies[OURS] = load_env_policy(run.run_dir / "best.pt")[0]
        rows, _ = compare_policies(policies, settings, dist, cfg.env.val_episodes, torch.device("cpu"))
        for row in rows:
            row.update(seed=seed, train_min=round(seconds.get(row["method"], 0.0) / 60, 1))
        results += rows
        print(format_table([{k: r[k] for k in ("seed", "method", "return", "of_planner", "train_min")} for r in rows]))
        write_json(args.out / "results.json", results)  # each seed's rows kept as soon as they are scored
    for method in (THEIRS, OURS, "nearest target", "random"):
        shares = [100 * r["of_planner"] for r in results if r["method"] == method]
        if shares:
            spread = f" +- {statistics.stdev(shares):.1f}" if len(shares) > 1 else ""
            each = ", ".join(f"{share:.1f}" for share in shares)
            print(f"{method}: {statistics.mean(shares):.1f}%{spread} of the planner ({each})")


if __name__ == "__main__":
    main()
