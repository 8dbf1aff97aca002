"""The model-based baselines of the dynamics model: what a controls engineer would fit before a network.

- ``kf``: a Kalman filter of position and velocity under the known kinematics without a disturbance
  (its process noise on the velocity absorbs it); it predicts by integrating the command with the speed limit
  and the wall.
- ``ekf``: an extended Kalman filter whose state adds the disturbance's parameters, the episode's wind (2)
  and the UAV's drag coefficient (1): d = wind - drag v is nonlinear in the state, and so are the speed limit
  and the wall. It is linearised at every row by forward-mode autodiff of the same step.

Both share ``kinematic_step`` with the TCN's physics loss and read what the TCN reads: at row t of a window,
the noisy positions of rows 0..t and the commands up to a_t. The future commands are unknown to every method:
the filters predict a_{t+j} = g_j a_t (g_0 = 1; the gains g_j start as the best such linear prediction on the
training split; holding a_t, g_j = 1, predicts the scripted planner's flights 10-20% worse 5 steps ahead).
Windows are filtered together (a loop over the window's rows only), differentiably: the settings - noise, priors,
gains - are parameters, which ``uavgnn.dynamics.tuning`` fits by gradient descent on the TCN's loss.

Their settings as estimated from the training split (``calibrate``): measurement noise from the
observed-minus-true positions, process noise from the one-step residual of the filter's own model on the true
states; the velocity's prior from the training split; the wind's and the drag's from the training environment's
uniform ranges (``env.wind``, ``env.drag``): what the engineer who set the simulation up knows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.func import jacfwd, vmap

from uavgnn.dynamics.kinematics import Estimate, kinematic_step
from uavgnn.dynamics.windows import Units, WindowBatch
from uavgnn.envs.settings import EnvSettings

FLOOR = 1e-6  # process noise added to every state (model units squared): keeps the covariance well conditioned


@dataclass(frozen=True)
class Calibration:
    """What a filter takes from the training split, in model units: position measurement variance, process
    covariance (n, n), the prior of the state after the position (velocity, and wind and drag for the
    augmented filter) and the gains g_j that predict the command j steps on from the current one."""

    measurement: float
    process: torch.Tensor
    prior_mean: torch.Tensor
    prior_var: torch.Tensor
    command_gain: torch.Tensor


def command_gains(accel: torch.Tensor, episode: torch.Tensor, steps: int) -> torch.Tensor:
    """(steps,) g_j = <a_{t+j}, a_t> / <a_t, a_t> over the pairs of rows of one episode with a command: the
    least-squares prediction of the command j steps on (g_0 = 1)."""
    a, last = accel[:, :-1], accel.shape[1] - 1  # the last row has no command
    gains = [torch.ones((), dtype=a.dtype)]
    for j in range(1, steps):
        same = (episode[:, j:last] == episode[:, : last - j])[..., None]
        gains.append((a[:, j:] * a[:, :-j] * same).sum() / (a[:, :-j].pow(2) * same).sum())
    return torch.stack(gains)


def calibrate(
    train: dict[str, Any], units: Units, settings: EnvSettings, disturbance: bool, predict_steps: int
) -> Calibration:
    """A filter's calibration from the training split's raw rollouts (``uavgnn.dynamics.rollouts``)."""
    pos, obs, vel, accel, true_d = (
        train[name].double() / units.of_target(name) for name in ("pos", "pos_obs", "vel", "accel", "disturbance")
    )
    same = train["episode"][:, 1:] == train["episode"][:, :-1]
    model_d = true_d[:, :-1] if disturbance else torch.zeros_like(true_d[:, :-1])
    next_pos, next_vel = kinematic_step(pos[:, :-1], vel[:, :-1], accel[:, :-1], model_d, units)
    residual = torch.cat([pos[:, 1:] - next_pos, vel[:, 1:] - next_vel], -1)[same]  # (rows, 4)
    n = 7 if disturbance else 4
    process = FLOOR * torch.eye(n, dtype=torch.float64)
    process[:4, :4] += residual.T @ residual / len(residual)
    speed = vel.pow(2).mean()  # per axis
    mean, var = [0.0, 0.0], [speed, speed]
    if disturbance:  # uniform wind magnitude in [0, wind], uniform direction; drag uniform in [0, drag]
        wind, drag = settings.wind / units.accel, settings.drag * units.velocity / units.accel
        mean += [0.0, 0.0, drag / 2]
        var += [wind**2 / 6, wind**2 / 6, drag**2 / 12 + FLOOR]
    return Calibration(
        float((obs - pos).pow(2).mean()),
        process,
        torch.tensor(mean, dtype=torch.float64),
        torch.tensor(var, dtype=torch.float64),
        command_gains(accel, train["episode"], predict_steps),
    )


class KinematicFilter(nn.Module):
    """A Kalman filter of one UAV's position and velocity (and, with a calibration of 7 states, its wind and
    drag), batched over windows; called on a batch it returns its ``Estimate`` like the TCN, with the covariance
    of its position and velocity. Its settings are parameters, initialised from a ``Calibration``, so that
    ``uavgnn.dynamics.tuning`` can fit them by gradient descent on the TCN's loss."""

    def __init__(self, units: Units, calibration: Calibration, window: int) -> None:
        """It reads the first ``window`` rows and predicts as many steps as ``calibration`` has gains."""
        super().__init__()
        self.units, self.window = units, window
        self.n = calibration.process.shape[0]
        steps = calibration.command_gain.shape[0]
        # Q = L L^T + FLOOR I, L lower triangular with its diagonal through exp: well conditioned for any value
        self.process_factor = nn.Parameter(torch.zeros(self.n, self.n, dtype=torch.float64))
        self.log_measurement = nn.Parameter(torch.zeros((), dtype=torch.float64))
        self.prior_mean = nn.Parameter(torch.zeros(self.n - 2, dtype=torch.float64))
        self.log_prior_var = nn.Parameter(torch.zeros(self.n - 2, dtype=torch.float64))
        self.command_gain = nn.Parameter(torch.zeros(steps - 1, dtype=torch.float64))  # g_0 = 1: the command itself
        self.set_calibration(calibration)
        self.jacobian = vmap(jacfwd(self.transition))

    @torch.no_grad()
    def set_calibration(self, calibration: Calibration) -> None:
        """Take ``calibration``'s settings (a calibration of the same numbers of states and steps)."""
        eye = torch.eye(self.n, dtype=torch.float64, device=self.process_factor.device)
        above_floor = calibration.process.to(eye.device) - FLOOR * eye  # zero where only the floor is given
        factor = torch.linalg.cholesky(above_floor + FLOOR**2 * eye)
        self.process_factor.copy_(factor.tril(-1) + torch.diag(factor.diagonal().log()))
        self.log_measurement.fill_(float(torch.tensor(calibration.measurement).log()))
        self.prior_mean.copy_(calibration.prior_mean)
        self.log_prior_var.copy_(calibration.prior_var.log())
        self.command_gain.copy_(calibration.command_gain[1:])

    @property
    def predict_steps(self) -> int:
        return self.command_gain.shape[0] + 1

    def process(self) -> torch.Tensor:
        """Q (n, n)."""
        raw = self.process_factor
        factor = raw.tril(-1) + torch.diag(raw.diagonal().exp())
        return factor @ factor.T + FLOOR * torch.eye(self.n, dtype=raw.dtype, device=raw.device)

    @torch.no_grad()
    def scale_noise(self, factor: float) -> None:
        """Every noise setting (process above its floor, measurement, prior variances) x ``factor``: the
        estimates stay as they are (the gains depend on the ratios only, the floor aside), the covariances scale
        by ``factor``."""
        half = 0.5 * torch.tensor(factor, dtype=torch.float64).log()
        diagonal = self.process_factor.diagonal()
        self.process_factor.copy_(self.process_factor.tril(-1) * half.exp() + torch.diag(diagonal + half))
        self.log_measurement.add_(2 * half)
        self.log_prior_var.add_(2 * half)

    def disturbance(self, state: torch.Tensor) -> torch.Tensor:
        """d = wind - drag v of the augmented state; zero for the filter without one."""
        if self.n == 4:
            return torch.zeros_like(state[..., 2:4])
        return state[..., 4:6] - state[..., 6:7] * state[..., 2:4]

    def transition(self, state: torch.Tensor, accel: torch.Tensor) -> torch.Tensor:
        """The state one step later under ``accel`` (wind and drag stay)."""
        pos, vel = kinematic_step(state[..., :2], state[..., 2:4], accel, self.disturbance(state), self.units)
        return torch.cat([pos, vel, state[..., 4:]], -1)

    def filtered(self, batch: WindowBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, W, n) the filtered state at every row of the windows, (B, W, 4, 4) the covariance of its
        position and velocity, and (B, W) the normalised innovation squared of each row's measurement (its
        mean is 2, the measurement's dimension, where the filter's noise settings have the right scale)."""
        window, n = self.window, self.n
        z, accel = batch.pos_obs[:, :window].double(), batch.accel[:, :window].double()
        b = len(batch)
        measurement = self.log_measurement.exp()
        r = measurement * torch.eye(2, dtype=z.dtype, device=z.device)
        q = self.process()
        eye = torch.eye(n, dtype=z.dtype, device=z.device)
        state = torch.cat([z[:, 0], self.prior_mean.expand(b, -1)], -1)
        cov = torch.diag(torch.cat([measurement.expand(2), self.log_prior_var.exp()])).expand(b, n, n)
        filtered, covariances, nis = [], [], []
        for t in range(window):
            if t > 0:
                jac = self.jacobian(state, accel[:, t - 1])
                state = self.transition(state, accel[:, t - 1])
                cov = jac @ cov @ jac.mT + q
            innovation, spread = (z[:, t] - state[:, :2])[..., None], cov[:, :2, :2] + r
            # S^-1 [H P, y] in one solve (solve_ex: no check of the result, so no wait for the device)
            solved = torch.linalg.solve_ex(spread, torch.cat([cov[:, :2], innovation], -1)).result
            gain = solved[..., :n].mT  # P H^T S^-1 (B, n, 2): P, S symmetric
            nis.append((innovation.mT @ solved[..., n:]).squeeze((-1, -2)))
            state = state + (gain @ innovation).squeeze(-1)
            keep = eye - torch.nn.functional.pad(gain, (0, n - 2))  # I - K H, H = [I 0]
            cov = keep @ cov @ keep.mT + gain @ r @ gain.mT  # Joseph form: stays symmetric positive
            filtered.append(state)
            covariances.append(cov[:, :4, :4])
        return torch.stack(filtered, 1), torch.stack(covariances, 1), torch.stack(nis, 1)

    def ahead(self, now: torch.Tensor, accel: torch.Tensor, commands: torch.Tensor) -> torch.Tensor:
        """(B, W, K, 2) the positions 1..K steps on from the states ``now`` (B, W, n): the command of each row
        ``accel`` (B, W, 2) first, then the predicted ones, ``commands`` (B, W, K - 1, 2)."""
        path = self.transition(now, accel)
        positions = [path[..., :2]]
        for j in range(commands.shape[2]):
            path = self.transition(path, commands[:, :, j])
            positions.append(path[..., :2])
        return torch.stack(positions, 2)

    def forward(self, batch: WindowBatch) -> Estimate:
        """The filter's estimate; the commands after a_t predicted from it, a_{t+j} = g_j a_t."""
        now, covariance, _ = self.filtered(batch)
        z, accel = batch.pos_obs[:, : self.window].double(), batch.accel[:, : self.window].double()
        commands = accel[:, :, None] * self.command_gain[:, None]  # (B, W, K - 1, 2)
        dtype = batch.pos_obs.dtype
        return Estimate(
            (now[..., :2] - z).to(dtype),
            (self.ahead(now, accel, commands) - z[:, :, None]).to(dtype),
            now[..., 2:4].to(dtype),
            self.disturbance(now).to(dtype),
            covariance,
        )


FILTERS = {"ekf": True, "kf": False}  # name -> whether wind and drag are in its state (the test table's rows)


def neutral_calibration(disturbance: bool, predict_steps: int) -> Calibration:
    """Unit settings, for a filter whose settings are loaded next (a checkpoint's, ``set_calibration``)."""
    n = 7 if disturbance else 4
    one = torch.ones(n - 2, dtype=torch.float64)
    return Calibration(
        1.0, torch.eye(n, dtype=torch.float64), 0 * one, one, torch.ones(predict_steps, dtype=torch.float64)
    )


def baseline_filters(
    train: dict[str, Any], units: Units, settings: EnvSettings, window: int, predict_steps: int
) -> dict[str, KinematicFilter]:
    """The EKF and the known-kinematics KF, by ``FILTERS``' names, with their settings estimated from the training
    split (``calibrate``)."""
    return {
        name: KinematicFilter(units, calibrate(train, units, settings, disturbance, predict_steps), window)
        for name, disturbance in FILTERS.items()
    }
