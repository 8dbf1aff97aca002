"""The model-based baselines of the dynamics model: what a controls engineer would fit before a network.

- ``kinematics``: a Kalman filter of position and velocity under the known kinematics without a disturbance
  (its process noise on the velocity absorbs it); it predicts by integrating the command with the speed limit
  and the wall.
- ``kalman``: an extended Kalman filter whose state adds the disturbance's parameters, the episode's wind (2)
  and the UAV's drag coefficient (1): d = wind - drag v is nonlinear in the state, and so are the speed limit
  and the wall. It is linearised at every row by forward-mode autodiff of the same step.

Both share ``kinematic_step`` with the TCN's physics loss and read what the TCN reads: at row t of a window,
the noisy positions of rows 0..t and the commands up to a_t. The future commands are unknown to every method:
the filters predict a_{t+j} = g_j a_t, the best such linear prediction on the training split (g_0 = 1;
holding a_t, g_j = 1, predicts the scripted planner's flights 10-20% worse 5 steps ahead). Windows are
filtered together (a loop over the window's rows only).

Noise levels come from the training split: measurement noise from the observed-minus-true positions, process
noise from the one-step residual of the filter's own model on the true states. The priors: the velocity's
from the training split; the wind's and the drag's from the training environment's uniform ranges
(``env.wind``, ``env.drag``): what the engineer who set the simulation up knows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
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


class KinematicFilter:
    """A Kalman filter of one UAV's position and velocity (and, with a calibration of 7 states, its wind and
    drag), batched over windows; called on a batch it returns its ``Estimate`` like the TCN."""

    def __init__(self, units: Units, calibration: Calibration, window: int) -> None:
        """It reads the first ``window`` rows and predicts as many steps as ``calibration`` has gains."""
        self.units, self.calibration, self.window = units, calibration, window
        self.n = calibration.process.shape[0]
        self.jacobian = vmap(jacfwd(self.transition))

    def disturbance(self, state: torch.Tensor) -> torch.Tensor:
        """d = wind - drag v of the augmented state; zero for the filter without one."""
        if self.n == 4:
            return torch.zeros_like(state[..., 2:4])
        return state[..., 4:6] - state[..., 6:7] * state[..., 2:4]

    def transition(self, state: torch.Tensor, accel: torch.Tensor) -> torch.Tensor:
        """The state one step later under ``accel`` (wind and drag stay)."""
        pos, vel = kinematic_step(state[..., :2], state[..., 2:4], accel, self.disturbance(state), self.units)
        return torch.cat([pos, vel, state[..., 4:]], -1)

    @torch.no_grad()
    def __call__(self, batch: WindowBatch) -> Estimate:
        window = self.window
        z, accel = batch.pos_obs[:, :window].double(), batch.accel[:, :window].double()
        b, n, cal = len(batch), self.n, self.calibration
        r = cal.measurement * torch.eye(2, dtype=z.dtype, device=z.device)
        q = cal.process.to(z.device)
        eye = torch.eye(n, dtype=z.dtype, device=z.device)
        state = torch.cat([z[:, 0], cal.prior_mean.to(z.device).expand(b, -1)], -1)
        cov = (
            torch.diag(torch.cat([cal.measurement * torch.ones(2, dtype=z.dtype), cal.prior_var]))
            .to(z.device)
            .expand(b, n, n)
        )
        filtered = []
        for t in range(window):
            if t > 0:
                jac = self.jacobian(state, accel[:, t - 1])
                state = self.transition(state, accel[:, t - 1])
                cov = jac @ cov @ jac.mT + q
            gain = torch.linalg.solve(cov[:, :2, :2] + r, cov[:, :2]).mT  # P H^T S^-1 (B, n, 2): P, S symmetric
            state = state + (gain @ (z[:, t] - state[:, :2])[..., None]).squeeze(-1)
            keep = eye - torch.nn.functional.pad(gain, (0, n - 2))  # I - K H, H = [I 0]
            cov = keep @ cov @ keep.mT + gain @ r @ gain.mT  # Joseph form: stays symmetric positive
            filtered.append(state)
        now = torch.stack(filtered, 1)  # (B, W, n)
        ahead, path = [], now
        for gain in cal.command_gain.tolist():  # the commands after a_t predicted from it
            path = self.transition(path, accel * gain)
            ahead.append(path[..., :2])
        dtype = batch.pos_obs.dtype
        return Estimate(
            (now[..., :2] - z).to(dtype),
            (torch.stack(ahead, 2) - z[:, :, None]).to(dtype),
            now[..., 2:4].to(dtype),
            self.disturbance(now).to(dtype),
        )


def baseline_filters(
    train: dict[str, Any], units: Units, settings: EnvSettings, window: int, predict_steps: int
) -> dict[str, KinematicFilter]:
    """The two baselines, named as in the test table, calibrated on the training split."""
    return {
        name: KinematicFilter(units, calibrate(train, units, settings, disturbance, predict_steps), window)
        for name, disturbance in (("kalman", True), ("kinematics", False))
    }
