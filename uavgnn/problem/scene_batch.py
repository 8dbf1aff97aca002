"""Scenes drawn in torch, B at once on any device: the generator of the environments (and of fresh-scene training).

Follows ``generate_scenes`` (numpy, for files and MILP labels) distribution for
distribution: the same square side, target count, position patterns, needs,
values and ranges; only the random stream differs. Randomness comes from a
``torch.Generator`` on the device, so a run that saves the generator's state
draws the same scenes after a resume.

``task.positions=mixed`` (``task=mixed``) is drawn here only (the numpy
generator calls this one): every scene draws its own distribution, so a model
trained on it has seen the shifts it will be tested on (``eval.shifts``). Per scene:
uniform or (2 in 3) clustered with 2-16 targets per cluster (log-uniform),
density ``task.density`` x 2^U(-1, 1), a range interval drawn inside
[``range_min``, ``range_max``] (from homogeneous to widely spread ranges), a top
need drawn in [``need_min``, ``need_max``] with needs uniform up to it; per
batch: the target ratio ``task.target_ratio`` x 2^U(-1, 1) (the target count is
one per batch so that scenes stack).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from uavgnn.infrastructure.errors import ConfigError
from uavgnn.problem.scenes import Scene, SceneDistribution


@dataclass
class SceneBatch:
    """B scenes of one size as tensors; distances in the scene's length unit."""

    uav_pos: torch.Tensor  # (B, N, 2)
    uav_range: torch.Tensor  # (B, N)
    target_pos: torch.Tensor  # (B, M, 2)
    need: torch.Tensor  # (B, M) int64
    value: torch.Tensor  # (B, M)
    side: float  # square side L (of stacked scenes: their largest coordinate)
    lam: float  # travel cost per unit distance

    def to_scenes(self) -> list[Scene]:
        """The B scenes as float64 numpy ``Scene`` objects (to label them with the MILP or save them)."""
        arrays = [t.detach().cpu().double().numpy() for t in (self.uav_pos, self.uav_range, self.target_pos)]
        need, value = self.need.cpu().numpy().astype(np.int64), self.value.detach().cpu().double().numpy()
        return [Scene(arrays[0][i], arrays[1][i], arrays[2][i], need[i], value[i], self.lam) for i in range(len(need))]

    @staticmethod
    def from_scenes(scenes: list[Scene], device: torch.device | str = "cpu") -> SceneBatch:
        """Scenes of one size stacked on ``device`` (their float64 precision kept)."""
        if len({(s.n_uav, s.n_target) for s in scenes}) != 1 or len({s.lam for s in scenes}) != 1:
            raise ValueError("SceneBatch.from_scenes: the scenes must share their UAV and target counts and lam")

        def stack(name: str) -> torch.Tensor:
            return torch.as_tensor(np.stack([getattr(s, name) for s in scenes]), device=device)

        corner = max(float(max(s.uav_pos.max(initial=0.0), s.target_pos.max(initial=0.0))) for s in scenes)
        return SceneBatch(
            stack("uav_pos"),
            stack("uav_range"),
            stack("target_pos"),
            stack("need"),
            stack("value"),
            corner,
            float(scenes[0].lam),
        )


def _uniform(
    low: float, high: float, shape: tuple[int, ...], generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    return low + (high - low) * torch.rand(shape, generator=generator, device=device)


def generate_scene_batch(
    dist: SceneDistribution, n_uav: int, count: int, generator: torch.Generator, device: torch.device
) -> SceneBatch:
    """``count`` scenes of ``n_uav`` UAVs drawn at once on ``device`` (no loop over scenes)."""
    if n_uav < 1 or count < 1:
        raise ValueError(f"generate_scene_batch: need n_uav >= 1 and count >= 1, got n_uav={n_uav}, count={count}")
    if dist.generator is not None:
        raise ConfigError(
            f"task.generator={dist.generator}: your generator draws numpy scenes for the cached "
            "splits (data.source=cache), mode=solve and mode=eval; the device generator "
            "(data.source=generated) and the UAV environment draw their own"
        )
    if dist.positions == "mixed":
        return _mixed_scene_batch(dist, n_uav, count, generator, device)
    n_target, side = dist.n_targets(n_uav), dist.side(n_uav)
    if dist.positions == "uniform":
        uav_pos = _uniform(0.0, side, (count, n_uav, 2), generator, device)
        target_pos = _uniform(0.0, side, (count, n_target, 2), generator, device)
    elif dist.positions == "clustered":
        n_clusters = max(1, math.ceil(n_target / dist.cluster_size))
        centres = _uniform(0.0, side, (count, n_clusters, 2), generator, device)
        target_cluster = torch.randint(0, n_clusters, (count, n_target), generator=generator, device=device)
        uav_cluster = torch.randint(0, n_clusters, (count, n_uav), generator=generator, device=device)

        def around(cluster: torch.Tensor, std: float) -> torch.Tensor:
            centre = torch.gather(centres, 1, cluster[..., None].expand(-1, -1, 2))
            noise = torch.randn(centre.shape, generator=generator, device=device)
            return (centre + std * noise).clamp(0.0, side)

        target_pos, uav_pos = around(target_cluster, dist.cluster_std), around(uav_cluster, dist.uav_spread)
    else:
        raise ValueError(
            f"task.positions: unknown distribution {dist.positions!r} (expected 'uniform', 'clustered' or 'mixed')"
        )
    uav_range = _uniform(dist.range_min, dist.range_max, (count, n_uav), generator, device)
    need = torch.randint(dist.need_min, dist.need_max + 1, (count, n_target), generator=generator, device=device)
    value = need * _uniform(dist.value_min, dist.value_max, (count, n_target), generator, device)
    return SceneBatch(uav_pos, uav_range, target_pos, need, value, side, float(dist.lam))


MIXED_CLUSTERED = 2 / 3  # task=mixed: share of clustered scenes
MIXED_SPREAD = 2.0  # task=mixed: density and target ratio vary by up to this factor either way


def _mixed_scene_batch(
    dist: SceneDistribution, n_uav: int, count: int, generator: torch.Generator, device: torch.device
) -> SceneBatch:
    """``task.positions=mixed``: every scene draws its own distribution (module docstring)."""

    def rand(*shape: int) -> torch.Tensor:
        return torch.rand(shape, generator=generator, device=device)

    n_target = max(1, math.ceil(n_uav * dist.target_ratio * MIXED_SPREAD ** (2 * float(rand(1)) - 1)))
    density = dist.density * MIXED_SPREAD ** (2 * rand(count, 1, 1) - 1)
    side = torch.sqrt((n_uav + n_target) / density)  # (count, 1, 1)
    n_clusters = torch.ceil(n_target / 2 ** (1 + 3 * rand(count, 1))).clamp(min=1)  # 2-16 targets per cluster
    centres = rand(count, max(1, math.ceil(n_target / 2)), 2) * side

    def place(n_points: int, std: float) -> torch.Tensor:
        cluster = (rand(count, n_points) * n_clusters).long()
        near = torch.gather(centres, 1, cluster[..., None].expand(-1, -1, 2))
        near = near + std * torch.randn(near.shape, generator=generator, device=device)
        spread = rand(count, n_points, 2) * side
        return torch.where(clustered, torch.minimum(near.clamp(min=0.0), side), spread)

    clustered = rand(count, 1, 1) < MIXED_CLUSTERED
    uav_pos, target_pos = place(n_uav, dist.uav_spread), place(n_target, dist.cluster_std)
    low, high = (dist.range_min + (dist.range_max - dist.range_min) * rand(count, 2, 1)).sort(1).values.unbind(1)
    uav_range = low + (high - low) * rand(count, n_uav)
    top_need = torch.randint(dist.need_min, dist.need_max + 1, (count, 1), generator=generator, device=device)
    need = dist.need_min + (rand(count, n_target) * (top_need - dist.need_min + 1)).long()
    value = need * (dist.value_min + (dist.value_max - dist.value_min) * rand(count, n_target))
    return SceneBatch(uav_pos, uav_range, target_pos, need, value, float(side.max()), float(dist.lam))
