"""The dynamics model's outputs and the known kinematics they must obey: what the loss (``algorithm=dynamics``)
and the scoring of a split (``uavgnn.dynamics.workload``) share.

At every row t the TCN (``uavgnn.models.tcn``) reads the observed positions and commands up to t and outputs,
in the model's units (``Units``): ``now`` (its estimate of the true position, as an offset from the observed
one), ``ahead`` (the next ``predict_steps`` positions, offsets from the observed one), ``velocity`` v_t and
``disturbance`` d_t (the hidden acceleration of the coming step: wind and drag). The kinematics
(``kinematic_step``): u = clip(v_t + r (a_t + d_t)), p_{t+1} = wall(p_t + u), v_{t+1} = p_{t+1} - p_t
(r = max_accel dt / max_speed; clip: the speed limit; wall: the arena's edge stops a UAV, and the velocity it
keeps is what it flew). The model-based baselines (``uavgnn.dynamics.filters``) use the same step.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from uavgnn.dynamics.windows import Units, WindowBatch


def output_size(predict_steps: int) -> int:
    """now (2) + ahead (2 per step) + velocity (2) + disturbance (2)."""
    return 2 * (predict_steps + 1) + 4


@dataclass
class Estimate:
    """An estimator's outputs at rows 0..window-1, in model units."""

    now: torch.Tensor  # (B, W, 2)
    ahead: torch.Tensor  # (B, W, K, 2)
    velocity: torch.Tensor  # (B, W, 2)
    disturbance: torch.Tensor  # (B, W, 2)
    covariance: torch.Tensor | None = None  # (B, W, 4, 4) of (position, velocity): a filter's own uncertainty

    def rows(self, start: int) -> Estimate:
        """The estimate of rows ``start``.. (a burn-in dropped)."""
        return Estimate(*(None if (t := getattr(self, f.name)) is None else t[:, start:] for f in fields(self)))

    @classmethod
    def of(cls, out: torch.Tensor, predict_steps: int) -> Estimate:
        """The TCN's output (B, W, ``output_size``) read as an estimate."""
        now, ahead, velocity, disturbance = out.split([2, 2 * predict_steps, 2, 2], -1)  # one op, one backward
        return cls(now, ahead.unflatten(-1, (predict_steps, 2)), velocity, disturbance)


def future(x: torch.Tensor, window: int, steps: int) -> torch.Tensor:
    """(B, window, steps, 2): rows t+1..t+steps of x (B, window + steps, 2) for every t < window."""
    return x[:, 1 : window + steps].unfold(1, steps, 1).transpose(2, 3)  # a view: windows of x's rows


def clamp_speed(v: torch.Tensor) -> torch.Tensor:
    """The speed limit, part of the known kinematics: at most 1 in model units (``env.max_speed``). Written
    with the squared speed so that its derivatives stay finite at rest (the filters differentiate it)."""
    return v * v.pow(2).sum(-1, keepdim=True).clamp(min=1.0).rsqrt()


def unwalled_step(
    pos: torch.Tensor, vel: torch.Tensor, accel: torch.Tensor, disturbance: torch.Tensor, units: Units
) -> torch.Tensor:
    """The position at t+1 in model units before the arena's wall: where the flown step would end."""
    return pos + clamp_speed(vel + units.accel_ratio * (accel + disturbance))


def kinematic_step(
    pos: torch.Tensor, vel: torch.Tensor, accel: torch.Tensor, disturbance: torch.Tensor, units: Units
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of the known kinematics in model units: the position and velocity at t+1. The arena's wall
    clamps the position, so a UAV pushed against it keeps only the velocity along it (as ``UAVEnv.step``)."""
    next_pos = unwalled_step(pos, vel, accel, disturbance, units).clamp(0.0, units.side)
    return next_pos, next_pos - pos


def data_loss(est: Estimate, batch: WindowBatch, window: int, start: int) -> torch.Tensor:
    """The data loss of an estimate of rows ``start``..``window``-1: the mean squared error of the positions
    ahead against the observed ones (every horizon weighed alike) plus that of the velocity against the
    measured one. Observed quantities only: what the TCN trains on and the filters are tuned on."""
    target = future(batch.pos_obs, window, est.ahead.shape[2])[:, start:] - batch.pos_obs[:, start:window, None]
    position = F.mse_loss(est.ahead.float(), target.float())
    return position + F.mse_loss(est.velocity.float(), batch.vel_obs[:, start:window].float())


def physics_pairs(
    est: Estimate, batch: WindowBatch, units: Units, start: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The kinematic residuals between rows t and t+1 of an estimate of rows ``start``.. of the windows, as
    (got, expected) pairs of (B, rows-1, 2): velocity, position, one-step prediction, and the disturbance's
    persistence at the wall. A step the wall stops does not depend on the disturbance normal to it (no gradient
    blames the estimate there), so on such a row that component is tied to the previous row's estimate, as the
    episode's wind is constant: the estimate from before the contact carries on. Pairs, not differences, so that
    the loss squares each in one fused op (``mse_loss``)."""
    rows = slice(start, start + est.now.shape[1])
    p_now = batch.pos_obs[:, rows] + est.now
    unclamped = unwalled_step(p_now, est.velocity, batch.accel[:, rows], est.disturbance, units)
    walled = unclamped.clamp(0.0, units.side)
    v_next = walled - p_now
    stopped = walled != unclamped  # per axis: the wall stops this row's step
    before = est.disturbance[:, :-1].detach()
    return [
        (est.velocity[:, 1:], v_next[:, :-1]),
        ((p_now - est.velocity)[:, 1:], p_now[:, :-1]),
        (est.ahead[:, :-1, 0], (est.now + v_next)[:, :-1]),
        (torch.where(stopped[:, 1:], est.disturbance[:, 1:], before), before),
    ]


def physics_residuals(est: Estimate, batch: WindowBatch, units: Units, start: int = 0) -> torch.Tensor:
    """(B, rows-1, 8) the residuals of ``physics_pairs`` side by side (columns 6, 7: the persistence)."""
    return torch.cat([got - expected for got, expected in physics_pairs(est, batch, units, start)], -1)


# a consistent filter's NEES of position and velocity stays below it on 95% of rows: the chi-square law's 95% quantile
# with 4 degrees of freedom (scipy.stats.chi2.ppf(0.95, 4); scipy.stats is not imported at start-up)
NEES_BOUND = 9.487729036781154

WALL_PERSISTENCE_WEIGHT = 40.0  # on the squared persistence residuals: the weight that brought the error on the rows
#                                 the wall stops closest to the error inside (BENCHMARKS.md)


def physics_loss(est: Estimate, batch: WindowBatch, units: Units, start: int) -> torch.Tensor:
    """The squared residuals of an estimate of rows ``start``.. (``estimate``'s ``start``: the burn-in),
    averaged per kinematic residual (6 a row): the wall's persistence terms (x ``WALL_PERSISTENCE_WEIGHT``) add
    to the rows they are on, so a batch away from the wall scores as without them."""
    velocity, position, step, wall = (
        F.mse_loss(got.float(), expected.float(), reduction="sum")
        for got, expected in physics_pairs(est, batch, units, start)
    )
    rows = est.now.shape[0] * (est.now.shape[1] - 1)
    return (velocity + position + step + WALL_PERSISTENCE_WEIGHT * wall) / (6 * rows)


class WindowModel(nn.Module):
    """A model that reads whole windows (``WindowBatch``) and returns its ``Estimate`` itself, such as the
    learned filter; other models read the normalised features and output ``output_size`` columns."""

    def forward(self, batch: WindowBatch) -> Estimate:
        raise NotImplementedError


def estimate(model: nn.Module, batch: WindowBatch, window: int, predict_steps: int, start: int = 0) -> Estimate:
    """The model's outputs on rows ``start``..``window``-1 of every window of ``batch`` (it reads rows 0.. of
    the window: ``start`` only drops rows, a burn-in, before the outputs are split)."""
    if isinstance(model, WindowModel):
        return model(batch).rows(start)
    return Estimate.of(model(batch.x[:, :window])[:, start:], predict_steps)


def constant_velocity(batch: WindowBatch, window: int, predict_steps: int) -> Estimate:
    """The constant-velocity baseline as an estimate: the last observed displacement, repeated; no disturbance
    (row 0 has no displacement yet and is never scored: ``burn_in`` >= 1)."""
    obs = batch.pos_obs[:, :window]
    last = torch.cat([torch.zeros_like(obs[:, :1]), obs[:, 1:] - obs[:, :-1]], 1)
    steps = torch.arange(1, predict_steps + 1, device=obs.device, dtype=obs.dtype)[:, None]
    return Estimate(torch.zeros_like(obs), steps * last[:, :, None], last, torch.zeros_like(obs))


def on_wall(pos: torch.Tensor, units: Units) -> torch.Tensor:
    """(...) bool: on the arena's wall (``kinematic_step`` clamps positions onto it exactly)."""
    return torch.minimum(pos, units.side - pos).amin(-1) < 1e-4


@torch.no_grad()
def dynamics_metrics(
    est: Estimate, batch: WindowBatch, units: Units, window: int, burn_in: int
) -> dict[str, torch.Tensor]:
    """Sums of squared errors (world units) of an estimate over rows burn_in..window-1, and the counts, for
    RMSEs: the position ``steps`` ahead (one sum per step; the last is the k-step error), the velocity, the
    disturbance (on every row, and apart on the edge rows, whose coming step the wall stops, and the others),
    the kinematic residual (model units, between consecutive rows), and for an estimate with a covariance the
    normalised estimation error squared of its position and velocity (``nees``, per dimension)."""
    w, b = window, burn_in
    truth = future(batch.pos, w, est.ahead.shape[2])

    def sq(error: torch.Tensor, unit: float) -> torch.Tensor:
        return (error.float() * unit).pow(2).sum(-1)[:, b:]

    ahead = sq(batch.pos_obs[:, :w, None] + est.ahead - truth, units.position)  # (B, rows, K)
    disturbance = sq(est.disturbance - batch.disturbance[:, :w], units.accel)
    edge = on_wall(batch.pos[:, b + 1 : w + 1], units).float()  # the wall stops the coming step; a weight, not a mask
    consistency = {}
    if est.covariance is not None:  # NEES: the filtered state's squared error in units of its own covariance
        error = torch.cat([batch.pos_obs[:, :w] + est.now - batch.pos[:, :w], est.velocity - batch.vel[:, :w]], -1)
        error = error[:, b:, :, None].double()
        nees = (error.mT @ torch.linalg.solve_ex(est.covariance[:, b:], error).result).squeeze((-1, -2))
        consistency["nees"] = (nees / error.shape[2]).sum()
        consistency["nees_in_95"] = (nees <= NEES_BOUND).sum()
    return {
        "steps": ahead.sum((0, 1)),
        "pred": ahead.mean(-1).sum(),
        "velocity": sq(est.velocity - batch.vel[:, :w], units.velocity).sum(),
        "disturbance": disturbance.sum(),
        "disturbance_edge": (disturbance * edge).sum(),
        "disturbance_interior": (disturbance * (1 - edge)).sum(),
        "physics": physics_residuals(est, batch, units)[:, b:].float().pow(2).sum(-1).sum(),
        "rows": torch.ones_like(edge).sum(),
        "edge_rows": edge.sum(),
        "interior_rows": (1 - edge).sum(),
        "physics_rows": torch.ones_like(edge[:, 1:]).sum(),
        **consistency,
    }


def rmses(sums: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The RMSEs of summed ``dynamics_metrics``: k-step, mean over steps, velocity, disturbance (all rows, near
    the wall, inside), kinematic residual, and the position error at each step ahead (``step_j_rmse``); for a
    filter, its mean NEES per state dimension (``nees``: 1 where its covariance matches its errors, above it
    overconfident) and the share of rows whose NEES is inside its 95% chi-square bound (``nees_in_95``: 0.95 where
    it matches; the mean is at the mercy of a few rows, the share is not)."""
    steps = (sums["steps"] / sums["rows"]).sqrt()
    out: dict[str, Any] = {"k_step_rmse": float(steps[-1]), "pred_rmse": float((sums["pred"] / sums["rows"]).sqrt())}
    for key, rows in (
        ("velocity", "rows"),
        ("disturbance", "rows"),
        ("disturbance_edge", "edge_rows"),
        ("disturbance_interior", "interior_rows"),
        ("physics", "physics_rows"),
    ):
        out[f"{key}_rmse"] = float((sums[key] / sums[rows].clamp(min=1)).sqrt())
    out.update({f"step_{j}_rmse": float(value) for j, value in enumerate(steps, 1)})
    if "nees" in sums:
        out["nees"] = float(sums["nees"] / sums["rows"])
        out["nees_in_95"] = float(sums["nees_in_95"] / sums["rows"])
    return out
