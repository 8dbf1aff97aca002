"""The filters' consistency (NEES) against a simulated linear-Gaussian flight, their tuning by gradient descent,
and the learned filter's start from its filter."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chi2

from uavgnn.dynamics.filters import FLOOR, Calibration, KinematicFilter
from uavgnn.dynamics.kinematics import NEES_BOUND, data_loss, dynamics_metrics, kinematic_step, rmses
from uavgnn.dynamics.learned_filter import LearnedFilter, corrected_outputs, network_inputs
from uavgnn.dynamics.tuning import TuningSettings, mean_data_loss, tune
from uavgnn.dynamics.windows import TrajectoryWindows, Units, feature_stats
from uavgnn.envs.settings import EnvSettings
from uavgnn.models.tcn import TCN

SETTINGS = EnvSettings(n_uav=1)
UNITS = Units.of(SETTINGS, side=3000 * SETTINGS.max_speed * SETTINGS.dt)  # far walls: the kinematics are linear
WINDOW, STEPS = 24, 3


def gaussian_flights(sequences: int, rows: int, velocity_noise: float, measurement: float, seed: int) -> dict:
    """Flights of the known kinematics from the arena's middle at low speed (the speed limit never binds), each
    step's velocity disturbed by white noise of variance ``velocity_noise`` and each position observed with noise
    of variance ``measurement`` (model units): exactly the model of a Kalman filter with those settings. Returned as
    a rollout split's payload (world units)."""
    g = torch.Generator().manual_seed(seed)
    accel = 0.1 * torch.randn(sequences, rows, 2, generator=g)
    pos, vel = torch.full((sequences, rows, 2), UNITS.side / 2), torch.zeros(sequences, rows, 2)
    for t in range(1, rows):
        p, v = kinematic_step(pos[:, t - 1], vel[:, t - 1], accel[:, t - 1], torch.zeros(sequences, 2), UNITS)
        pos[:, t], vel[:, t] = p, v + velocity_noise**0.5 * torch.randn(sequences, 2, generator=g)
    observed = pos + measurement**0.5 * torch.randn(pos.shape, generator=g)
    world = {"pos": pos, "pos_obs": observed, "vel": vel, "vel_obs": vel, "accel": accel, "disturbance": 0 * vel}
    payload = {name: value * UNITS.of_target(name) for name, value in world.items()}
    return {**payload, "episode": torch.zeros(sequences, rows, dtype=torch.long), "side": torch.tensor(3000.0)}


def windows(payload: dict, stride: int = 1) -> TrajectoryWindows:
    return TrajectoryWindows(payload, feature_stats(payload, UNITS), UNITS, WINDOW + STEPS, stride)


def velocity_filter(velocity_noise: float, measurement: float) -> KinematicFilter:
    """The known-kinematics filter with the given settings: process noise on the velocity only, a wide prior,
    the commands held."""
    process = torch.diag(torch.tensor([0, 0, velocity_noise, velocity_noise], dtype=torch.float64)) + FLOOR * torch.eye(
        4
    )
    one = torch.ones(2, dtype=torch.float64)
    calibration = Calibration(measurement, process, 0 * one, one, torch.ones(STEPS, dtype=torch.float64))
    return KinematicFilter(UNITS, calibration, WINDOW)


def test_a_filter_with_the_true_noise_is_consistent_and_one_too_sure_is_not() -> None:
    """On flights that follow its model exactly, the filter given the true noise has a mean NEES of 1 per
    dimension (its errors are as large as its covariance says: chi-square with 4 degrees of freedom, over
    ~5,000 rows); told the measurements are 25 times more precise than they are, it is overconfident."""
    batch = windows(gaussian_flights(256, WINDOW + STEPS, 0.01, 0.04, seed=0), stride=WINDOW).gather(torch.arange(256))
    nees = {}
    for name, measurement in (("true", 0.04), ("too sure", 0.04 / 25)):
        est = velocity_filter(0.01, measurement)(batch)
        nees[name] = rmses(dynamics_metrics(est, batch, UNITS, WINDOW, burn_in=4))["nees"]
    assert 0.9 < nees["true"] < 1.1
    assert nees["too sure"] > 3
    assert NEES_BOUND == pytest.approx(chi2.ppf(0.95, 4), rel=1e-12)  # the bound of the nees_in_95 column


def test_tuning_on_the_data_loss_finds_the_noise() -> None:
    """Started with a measurement noise 100 times the truth (a filter that barely follows its measurements),
    gradient descent on the TCN's data loss finds the ratio of the process noise to the measurement noise (all
    that the estimates depend on), and the innovations' spread their scale: both within 1.5x of the truth. The
    settings kept are those of the lowest validation loss in the history, the start included."""
    train = windows(gaussian_flights(64, 80, 0.01, 0.04, seed=1))
    val = windows(gaussian_flights(32, 80, 0.01, 0.04, seed=2), stride=WINDOW - 4)
    flt = velocity_filter(0.01, 4.0)
    before = mean_data_loss(flt, val, burn_in=4)
    history = tune(flt, train, val, 4, TuningSettings(steps=60, batch_size=128, lr=0.1, validate_every=10), seed=0)
    assert history[0]["val_loss"] == before
    kept = mean_data_loss(flt, val, burn_in=4)
    # the kept settings' loss: the best in the history (the scaling to the innovations moves it by the floor only)
    assert kept == pytest.approx(min(h["val_loss"] for h in history), rel=1e-4) and kept < 0.9 * before
    measurement, velocity_noise = float(flt.log_measurement.exp()), flt.process().diagonal()[2:].mean()
    assert 1 / 1.5 < float(velocity_noise / measurement) / 0.25 < 1.5
    assert 1 / 1.5 < measurement / 0.04 < 1.5


def test_the_learned_filter_starts_as_its_filter_and_leaves_it_untouched() -> None:
    """Its correction starts at zero, so its estimate is the filter's exactly; a training step moves the network
    only, never the filter's settings; its position, velocity and covariance stay the filter's."""
    payload = gaussian_flights(8, WINDOW + STEPS, 0.01, 0.04, seed=3)
    batch = windows(payload, stride=WINDOW).gather(torch.arange(8))
    flt = velocity_filter(0.01, 0.04)
    network = TCN(network_inputs(STEPS), corrected_outputs(STEPS), 8, 2)
    learned = LearnedFilter(velocity_filter(0.01, 0.04), velocity_filter(0.02, 0.04), network, network.out)
    ours, theirs = learned(batch), flt(batch)
    for field in ("now", "ahead", "velocity", "disturbance", "covariance"):
        torch.testing.assert_close(getattr(ours, field), getattr(theirs, field), rtol=0, atol=0)
    settings = {name: value.clone() for name, value in learned.filter.state_dict().items()}
    weights = network.out.weight.clone()
    optimizer = torch.optim.Adam(learned.parameters(), lr=0.01)
    data_loss(learned(batch).rows(4), batch, WINDOW, 4).backward()
    optimizer.step()
    assert all(torch.equal(learned.filter.state_dict()[name], value) for name, value in settings.items())
    assert not torch.equal(network.out.weight, weights)
    trained, theirs = learned(batch), flt(batch)
    assert not torch.equal(trained.ahead, theirs.ahead)
    for field in ("now", "velocity", "covariance"):
        torch.testing.assert_close(getattr(trained, field), getattr(theirs, field), rtol=0, atol=0)
