"""The dynamics model's outputs and the known kinematics they must obey: what the loss (``algorithm=dynamics``)
and the scoring of a split (``uavgnn.dynamics.workload``) share.

At every row t the TCN (``uavgnn.models.tcn``) reads the observed positions and commands up to t and outputs,
in the model's units (``Units``): ``now`` (its estimate of the true position, as an offset from the observed
one), ``ahead`` (the next ``predict_steps`` positions, offsets from the observed one), ``velocity`` v_t and
``disturbance`` d_t (the hidden acceleration of the coming step: wind and drag). The kinematics:
v_{t+1} = clip(v_t + r (a_t + d_t)) and p_{t+1} = p_t + v_{t+1} (r = max_accel dt / max_speed; clip: the speed
limit).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from uavgnn.dynamics.windows import Units, WindowBatch


def output_size(predict_steps: int) -> int:
    """now (2) + ahead (2 per step) + velocity (2) + disturbance (2)."""
    return 2 * (predict_steps + 1) + 4


@dataclass
class Estimate:
    """The model's outputs at rows 0..window-1, in model units."""

    now: torch.Tensor  # (B, W, 2)
    ahead: torch.Tensor  # (B, W, K, 2)
    velocity: torch.Tensor  # (B, W, 2)
    disturbance: torch.Tensor  # (B, W, 2)

    @classmethod
    def of(cls, out: torch.Tensor, predict_steps: int) -> Estimate:
        k = predict_steps
        return cls(out[..., :2], out[..., 2:2 * k + 2].unflatten(-1, (k, 2)), out[..., 2 * k + 2:2 * k + 4],
                   out[..., 2 * k + 4:])


def future(x: torch.Tensor, window: int, steps: int) -> torch.Tensor:
    """(B, window, steps, 2): rows t+1..t+steps of x (B, window + steps, 2) for every t < window."""
    return torch.stack([x[:, j:j + window] for j in range(1, steps + 1)], 2)


def clamp_speed(v: torch.Tensor) -> torch.Tensor:
    """The speed limit, part of the known kinematics: at most 1 in model units (``env.max_speed``)."""
    return v / v.norm(dim=-1, keepdim=True).clamp(min=1.0)


def physics_residuals(est: Estimate, batch: WindowBatch, units: Units, window: int) -> torch.Tensor:
    """(B, window-1, 6) kinematic residuals between rows t and t+1: velocity, position, one-step prediction."""
    a = batch.accel[:, :window - 1]
    v_next = clamp_speed(est.velocity[:, :-1] + units.accel_ratio * (a + est.disturbance[:, :-1]))
    p_now = batch.pos_obs[:, :window] + est.now
    r_velocity = est.velocity[:, 1:] - v_next
    r_position = p_now[:, 1:] - p_now[:, :-1] - est.velocity[:, 1:]
    r_step = est.ahead[:, :-1, 0] - est.now[:, :-1] - v_next
    return torch.cat([r_velocity, r_position, r_step], -1)


def estimate(model: nn.Module, batch: WindowBatch, window: int, predict_steps: int) -> Estimate:
    """The model's outputs on the first ``window`` rows of every window of ``batch``."""
    return Estimate.of(model(batch.x[:, :window]), predict_steps)


@torch.no_grad()
def dynamics_metrics(est: Estimate, batch: WindowBatch, units: Units, window: int, burn_in: int) -> dict[str, torch.Tensor]:
    """Sums of squared errors (world units) over rows burn_in..window-1 and their count, for RMSEs:
    k-step (the last predicted row) and mean-over-steps prediction error of the TCN and of the
    constant-velocity baseline (last observed displacement, repeated), velocity and disturbance
    estimation error, and the kinematic residual (in model units)."""
    w, b, k = window, burn_in, est.ahead.shape[2]
    p_obs = batch.pos_obs[:, :w, None]
    truth = future(batch.pos, w, k)
    steps = torch.arange(1, k + 1, device=truth.device, dtype=truth.dtype)[:, None]
    last_step = (batch.pos_obs[:, 1:w] - batch.pos_obs[:, :w - 1])[:, :, None]  # rows 1..w-1 (b >= 1)
    constant_velocity = batch.pos_obs[:, 1:w, None] + steps * last_step

    def sq(error: torch.Tensor, unit: float) -> torch.Tensor:
        return (error.float() * unit).pow(2).sum(-1)

    tcn = sq(p_obs + est.ahead - truth, units.position)[:, b:]
    baseline = sq(constant_velocity - truth[:, 1:], units.position)[:, b - 1:]
    return {"k_step": tcn[..., -1].sum(), "pred": tcn.mean(-1).sum(),
            "cv_k_step": baseline[..., -1].sum(), "cv_pred": baseline.mean(-1).sum(),
            "velocity": sq(est.velocity - batch.vel[:, :w], units.velocity)[:, b:].sum(),
            "disturbance": sq(est.disturbance - batch.disturbance[:, :w], units.accel)[:, b:].sum(),
            "physics": physics_residuals(est, batch, units, w)[:, b:].float().pow(2).sum(-1).sum(),  # model units
            "rows": torch.tensor(float(len(batch) * (w - b)), device=truth.device),
            "physics_rows": torch.tensor(float(len(batch) * (w - 1 - b)), device=truth.device)}
