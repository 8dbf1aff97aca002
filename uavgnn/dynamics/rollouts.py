"""Trajectory datasets from the UAV environment (``mode=rollouts``; loaded by ``algorithm=dynamics``).

A split is ``envs`` environments played for ``rollout_steps`` steps (episodes
auto-reset inside) by a policy - the scripted planner, random actions, or a
trained MASAC, COMA or MAPPO checkpoint - in an environment with hidden wind and drag
(``env=windy``). Recorded for every UAV at rows t = 0..steps: its true
position p_t and velocity v_t, the commanded acceleration a_t the policy chose
at t (applied in the step t -> t+1), the hidden disturbance d_t of that step
(``wind - drag * v_t``) and the episode the row belongs to. What a model may
use: positions observed with Gaussian noise (``noise``) and the commands; a
velocity measurement with its own noise (``velocity_noise``) is a training
label only. The true positions, velocities and disturbances are for scoring.

Splits live in the on-disk cache like the graph splits (content-hashed key:
environment, scene distribution, policy - a checkpoint by its SHA-256 -
noise, sizes, seed; atomic writes, checksum verified on load). Simulation runs
on the CPU, so a key names the same tensors on every machine.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from uavgnn.data.cache import key_hash, load_or_build_payload
from uavgnn.envs.policies import Policy
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import env_class, make_env
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.infrastructure.randomness import stream
from uavgnn.infrastructure.user_code import source_digest
from uavgnn.problem.generator import distribution_key
from uavgnn.problem.scenes import SceneDistribution

FORMAT_VERSION = 2  # 2: observation noise from its own named stream
SPLITS = ("train", "val", "test", "test_ood")
RECORDED = ("pos", "vel", "accel", "disturbance")  # (S, T + 1, 2) each; S = envs x UAVs sequences


@dataclass(frozen=True)
class RolloutSpec:
    """One split: ``envs`` environments for ``steps`` steps, disturbances x ``disturbance_scale``."""

    split: str
    envs: int
    steps: int
    seed: int
    disturbance_scale: float = 1.0  # > 1 on test_ood: wind and drag beyond the training range
    noise: float = 0.01  # std of the observed positions
    velocity_noise: float = 0.02  # std of the measured velocities (a label, never an input)


@dataclass(frozen=True)
class RolloutSource:
    """Where a run's trajectory splits come from: the environment and its scenes, each split's spec, the cache."""

    settings: EnvSettings
    dist: SceneDistribution
    specs: dict[str, RolloutSpec]  # one per split of ``SPLITS``
    cache_dir: str = ".cache/uavgnn"


@torch.no_grad()
def simulate(settings: EnvSettings, dist: SceneDistribution, spec: RolloutSpec, policy: Policy) -> dict[str, Any]:
    """Play the split (a loop over time only; environments and UAVs are batched) and add observation noise."""
    scaled = dataclasses.replace(
        settings, wind=settings.wind * spec.disturbance_scale, drag=settings.drag * spec.disturbance_scale
    )
    env = make_env(scaled, dist, spec.envs, torch.device("cpu"), seed=spec.seed)
    rows = {name: torch.zeros(spec.steps + 1, spec.envs, settings.n_uav, 2) for name in RECORDED}
    episode = torch.zeros(spec.steps + 1, spec.envs, dtype=torch.long)
    for t in range(spec.steps + 1):
        rows["pos"][t], rows["vel"][t] = env.pos, env.vel
        if t == spec.steps:
            break  # the last row has no command: it is only ever a prediction target
        step = env.step(policy(env))
        rows["accel"][t], rows["disturbance"][t] = step.accel, step.disturbance
        episode[t + 1] = episode[t] + step.done.long()
    out: dict[str, Any] = {
        name: value.permute(1, 2, 0, 3).reshape(-1, spec.steps + 1, 2).contiguous() for name, value in rows.items()
    }
    out["episode"] = episode.T.repeat_interleave(settings.n_uav, 0)  # (S, T + 1): sequence s = env s // N
    noise = stream(spec.seed, "observation_noise")
    out["pos_obs"] = out["pos"] + spec.noise * torch.randn(out["pos"].shape, generator=noise)
    out["vel_obs"] = out["vel"] + spec.velocity_noise * torch.randn(out["vel"].shape, generator=noise)
    out["side"] = torch.tensor(dist.side(settings.n_uav))
    return out


# env fields newer than the first caches
ADDED_SINCE = {
    "disrupted_share": 1.0,
    "goto_home": False,
    "late_appear_steps": 0,
    "one_disruption": False,
    "obs_target_velocity": False,
}


def rollout_key(spec: RolloutSpec, settings: EnvSettings, dist: SceneDistribution, policy_id: str) -> dict[str, Any]:
    """Every field that changes a split's content (your own environment's path and source code too; without
    one, the fields as they were before ``env.target`` existed, and the fields added since only away from their
    defaults, so the caches built before them still match)."""
    env = {k: v for k, v in dataclasses.asdict(settings).items() if k not in ("name", "n_envs", "target")}
    for name, default in ADDED_SINCE.items():
        if env[name] == default:
            del env[name]
    if settings.target is not None:
        env.update(target=settings.target, target_source=source_digest(env_class(settings.target)))
    return {
        "format_version": FORMAT_VERSION,
        "kind": "rollouts",
        "spec": dataclasses.asdict(spec),
        "env": env,
        "distribution": distribution_key(dist),
        "policy": policy_id,
    }


def load_rollouts(source: RolloutSource, split: str, policy: Policy, policy_id: str) -> dict[str, Any]:
    """A split's trajectories from the cache, simulated (and cached) on a miss; ``policy`` flies them and
    ``policy_id`` names it in the cache key (``scripted``, ``random``, a checkpoint by its SHA-256)."""
    if split not in SPLITS:
        raise ConfigError(f"unknown rollout split {split!r} (expected one of {', '.join(SPLITS)})")
    settings, dist, spec = source.settings, source.dist, source.specs[split]
    key = rollout_key(spec, settings, dist, policy_id)

    def build() -> tuple[dict[str, Any], dict, int, int]:
        start = time.perf_counter()
        payload = simulate(settings, dist, spec, policy)
        return payload, {"timings": {"simulate_s": time.perf_counter() - start}}, spec.envs, settings.n_uav

    directory = Path(source.cache_dir) / f"rollouts-{split}-n{settings.n_uav}-{key_hash(key)}"
    return load_or_build_payload(directory, key, build, f"{spec.envs} environments x {spec.steps} steps")
