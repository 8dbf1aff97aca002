"""The dynamics model: recorded disturbances, windows normalised once, the TCN's causality, the physics loss
on hand-built kinematics, cached rollouts, and algorithm=dynamics through the shared loop, resume and profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import compose, straight_and_resumed

from uavgnn.algorithms.dynamics import rollout_source
from uavgnn.algorithms.registry import check_config
from uavgnn.config.settings import env_settings
from uavgnn.dynamics.filters import FLOOR, Calibration, KinematicFilter, calibrate
from uavgnn.dynamics.kinematics import (
    Estimate,
    constant_velocity,
    dynamics_metrics,
    future,
    kinematic_step,
    on_wall,
    output_size,
    physics_loss,
    physics_residuals,
)
from uavgnn.dynamics.rollouts import RolloutSpec, load_rollouts, simulate
from uavgnn.dynamics.windows import (
    NaiveWindows,
    TrajectoryWindows,
    Units,
    WindowBatch,
    collate_naive,
    feature_stats,
    window_starts,
)
from uavgnn.envs.policies import random_policy, scripted_planner
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.infrastructure.errors import CheckpointError, ConfigError
from uavgnn.models.tcn import TCN
from uavgnn.problem.scenes import SceneDistribution

WINDY = EnvSettings(n_uav=3, horizon=30, wind=0.05, drag=0.3)
UNITS = Units.of(WINDY, side=3.0)


def test_the_env_applies_and_reports_the_hidden_wind_and_drag() -> None:
    env = UAVEnv(WINDY, SceneDistribution(range_min=40.0, range_max=50.0), 5, torch.device("cpu"), seed=1)
    for _ in range(3):  # get the UAVs moving
        env.step(random_policy(env))
    vel, wind, drag = env.vel.clone(), env.wind.clone(), env.drag.clone()
    assert (wind.norm(dim=-1) <= 0.05).all() and ((drag >= 0) & (drag <= 0.3)).all() and wind.abs().sum() > 0
    step = env.step(random_policy(env))
    torch.testing.assert_close(step.disturbance, wind[:, None] - drag[..., None] * vel)
    # the velocity flown: v + (a + d) dt within the speed limit (UAVs stopped by a wall, or reset, are skipped)
    free = (step.positions > 0).all(-1) & (step.positions < env.side).all(-1) & ~step.done[:, None]
    expected = vel + (step.accel + step.disturbance) * WINDY.dt
    expected = expected * (WINDY.max_speed / expected.norm(dim=-1, keepdim=True).clamp(min=WINDY.max_speed))
    assert free.sum() >= 10
    torch.testing.assert_close(env.vel[free], expected[free])
    assert (step.accel.norm(dim=-1) <= WINDY.max_accel + 1e-6).all()


def test_windows_stay_inside_one_episode() -> None:
    episode = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0]])
    assert window_starts(episode, 3).tolist() == [[0, 0], [0, 3], [0, 4], [1, 0], [1, 1], [1, 2], [1, 3], [1, 4]]
    assert window_starts(episode, 3, stride=2).tolist() == [[0, 0], [0, 4], [1, 0], [1, 2], [1, 4]]


@pytest.fixture(scope="module")
def small_rollouts() -> dict:
    spec = RolloutSpec("train", envs=3, steps=40, seed=5)
    return simulate(WINDY, SceneDistribution(target_ratio=2.0, range_min=40.0, range_max=50.0), spec, scripted_planner)


def test_normalising_once_gives_the_batches_of_the_per_sample_pipeline(small_rollouts) -> None:
    stats = feature_stats(small_rollouts, UNITS)
    fast = TrajectoryWindows(small_rollouts, stats, UNITS, length=12)
    naive = NaiveWindows(small_rollouts, stats, UNITS, length=12)
    assert len(fast) == len(naive) > 0
    ids = torch.randperm(len(fast), generator=torch.Generator().manual_seed(0))[:40]
    a, b = fast.gather(ids), collate_naive([naive[int(i)] for i in ids])
    for name in ("x", "pos_obs", "pos", "vel_obs", "vel", "accel", "disturbance"):
        torch.testing.assert_close(getattr(a, name), getattr(b, name), rtol=1e-5, atol=1e-5, msg=name)
    x = fast.table[:, :6]
    torch.testing.assert_close(x.mean(0), torch.zeros(6), atol=1e-4, rtol=0)  # the training split's own stats


def test_the_tcn_sees_only_the_past_within_its_receptive_field() -> None:
    torch.manual_seed(0)
    model = TCN(6, 4, hidden=8, layers=2)
    assert model.receptive_field == 13
    x = torch.randn(2, 30, 6)
    out = model(x)
    later = x.clone()
    later[:, 20:] += 1.0
    torch.testing.assert_close(model(later)[:, :20], out[:, :20])  # rows < 20 ignore rows >= 20
    t = 25
    early = x.clone()
    early[:, t - 13] += 1.0  # just outside row 25's receptive field
    torch.testing.assert_close(model(early)[:, t], out[:, t])
    early[:, t - 12] += 1.0  # just inside
    assert not torch.allclose(model(early)[:, t], out[:, t])


def kinematic_batch(window: int, k: int, units: Units) -> tuple[WindowBatch, Estimate]:
    """Trajectories integrated by hand in model units (v' = v + r (a + d), p' = p + v'), and the true estimate."""
    g = torch.Generator().manual_seed(0)
    length, r = window + k, units.accel_ratio
    accel = 0.1 * torch.randn(2, length, 2, generator=g)  # speeds stay below the limit (1)
    disturbance = 0.05 * torch.randn(2, 1, 2, generator=g).expand(2, length, 2).clone()
    vel, pos = torch.zeros(2, length, 2), torch.full((2, length, 2), 20.0)  # far inside units.side
    vel[:, 0] = 0.1 * torch.randn(2, 2, generator=g)
    for t in range(1, length):
        vel[:, t] = vel[:, t - 1] + r * (accel[:, t - 1] + disturbance[:, t - 1])
        pos[:, t] = pos[:, t - 1] + vel[:, t]
    pos_obs = pos + 0.05 * torch.randn(pos.shape, generator=g)
    batch = WindowBatch(torch.zeros(2, length, 6), pos_obs, pos, vel, vel, accel, disturbance)
    est = Estimate(
        (pos - pos_obs)[:, :window],
        future(pos, window, k) - pos_obs[:, :window, None],
        vel[:, :window],
        disturbance[:, :window],
    )
    return batch, est


def test_the_physics_residual_vanishes_on_exact_kinematics_and_measures_a_wrong_disturbance() -> None:
    units = Units(position=0.3, velocity=0.3, accel=0.15, dt=1.0, side=40.0)
    batch, est = kinematic_batch(window=10, k=3, units=units)
    assert physics_residuals(est, batch, units).abs().max() < 1e-6
    off = Estimate(est.now, est.ahead, est.velocity, est.disturbance + torch.tensor([0.1, 0.0]))
    residual = physics_residuals(off, batch, units)
    torch.testing.assert_close(residual[..., 0], torch.full((2, 9), -units.accel_ratio * 0.1))  # r_v = -r * 0.1
    metrics = dynamics_metrics(est, batch, units, window=10, burn_in=2)
    assert metrics["steps"].max() < 1e-10 and metrics["velocity"] < 1e-10 and metrics["disturbance"] < 1e-10
    assert metrics["rows"] == 2 * 8 and metrics["edge_rows"] == 0
    baseline = dynamics_metrics(constant_velocity(batch, 10, 3), batch, units, window=10, burn_in=2)
    assert baseline["steps"][-1] > 0  # the baseline ignores the acceleration


def test_the_constant_velocity_baseline_is_exact_on_straight_noiseless_lines() -> None:
    units = Units(position=1.0, velocity=1.0, accel=1.0, dt=1.0, side=10.0)
    pos = 5.0 + torch.arange(14.0)[None, :, None] * torch.tensor([0.2, -0.1])  # (1, 14, 2)
    zero = torch.zeros_like(pos)
    batch = WindowBatch(torch.zeros(1, 14, 6), pos, pos, zero, zero, zero, zero)
    metrics = dynamics_metrics(constant_velocity(batch, 10, 4), batch, units, window=10, burn_in=1)
    assert metrics["steps"].max() < 1e-10 and metrics["pred"] < 1e-10
    stay = Estimate(zero[:, :10], zero[:, :10, None].expand(-1, -1, 4, -1), zero[:, :10], zero[:, :10])
    metrics = dynamics_metrics(stay, batch, units, window=10, burn_in=1)
    torch.testing.assert_close(metrics["steps"][-1], (pos[0, 5:14] - pos[0, 1:10]).pow(2).sum())  # "stay"


WALL = Units(position=0.3, velocity=0.3, accel=0.15, dt=1.0, side=30.0)  # accel_ratio 0.5


def test_the_wall_stops_a_uav_in_the_kinematics_and_the_physics_residual() -> None:
    """Worked by hand: from x = 1.5 at -0.8 with the wind at -0.4 (x), no command. Step 1: -0.8 - 0.5 * 0.4 =
    -1.0 -> x = 0.5. Step 2: -1.2, limited to -1.0 -> x = -0.5, the wall: x = 0, velocity -0.5. Step 3: -0.7 ->
    the wall again, velocity 0; and so on."""
    x = torch.tensor([1.5, 0.5, 0.0, 0.0, 0.0, 0.0])
    v = torch.tensor([-0.8, -1.0, -0.5, 0.0, 0.0, 0.0])
    pos, vel = torch.stack([x, torch.full_like(x, 5.0)], -1)[None], torch.stack([v, torch.zeros_like(v)], -1)[None]
    wind = torch.tensor([-0.4, 0.0]).expand(1, 6, 2)
    for t in range(5):
        stepped = kinematic_step(pos[:, t], vel[:, t], torch.zeros(1, 2), wind[:, t], WALL)
        torch.testing.assert_close(torch.cat(stepped, -1), torch.cat([pos[:, t + 1], vel[:, t + 1]], -1))
    batch = WindowBatch(torch.zeros(1, 6, 6), pos, pos, vel, vel, torch.zeros(1, 6, 2), wind)
    truth = Estimate(torch.zeros(1, 5, 2), (pos[:, 1:] - pos[:, :5])[:, :, None], vel[:, :5], wind[:, :5])
    assert physics_residuals(truth, batch, WALL).abs().max() < 1e-6  # without the wall: 0.7 at step 3
    metrics = dynamics_metrics(truth, batch, WALL, window=5, burn_in=0)
    assert metrics["edge_rows"] == 4 and metrics["interior_rows"] == 1  # the steps from rows 1..4 end on the wall


def test_at_the_wall_only_the_persistence_residual_sees_the_disturbance_normal_to_it() -> None:
    """The rollout above with the wind at row 3 estimated as -0.2 instead of -0.4: its step is stopped either way
    (0 + 0.5 * -0.2 < 0), so the kinematic residuals are blind to it; the persistence columns (6: x, 7: y) show
    +0.2 against row 2 and -0.2 at row 4 against it, and only the later row of each pair is pulled."""
    x, v = torch.tensor([1.5, 0.5, 0.0, 0.0, 0.0, 0.0]), torch.tensor([-0.8, -1.0, -0.5, 0.0, 0.0, 0.0])
    pos, vel = torch.stack([x, torch.full_like(x, 5.0)], -1)[None], torch.stack([v, torch.zeros_like(v)], -1)[None]
    wind = torch.tensor([-0.4, 0.0]).expand(1, 6, 2)
    batch = WindowBatch(torch.zeros(1, 6, 6), pos, pos, vel, vel, torch.zeros(1, 6, 2), wind)
    guess = wind[:, :5].clone()
    guess[0, 3, 0] = -0.2
    guess.requires_grad_(True)
    est = Estimate(torch.zeros(1, 5, 2), (pos[:, 1:] - pos[:, :5])[:, :, None], vel[:, :5], guess)
    residual = physics_residuals(est, batch, WALL)
    assert residual[..., :6].abs().max() < 1e-6
    torch.testing.assert_close(residual[0, :, 6], torch.tensor([0.0, 0.0, 0.2, -0.2]))
    assert residual[..., 7].abs().max() == 0
    residual[..., 6].pow(2).sum().backward()
    torch.testing.assert_close(guess.grad[0, :, 0], torch.tensor([0.0, 0.0, 0.0, 0.4, -0.4]))


def test_the_physics_loss_of_an_estimate_cut_at_the_burn_in_weighs_the_residuals_from_that_row() -> None:
    """The loss (rows ``start``.. only, fused squares) against the residuals of the whole window read by hand:
    the six kinematic columns plus 40x the two persistence ones, from the burn-in row on, per row and column.
    On the wall rollout above with a noisy estimate, so that every column but the persistence
    of y (which never meets the wall) is non-zero."""
    x, v = torch.tensor([1.5, 0.5, 0.0, 0.0, 0.0, 0.0]), torch.tensor([-0.8, -1.0, -0.5, 0.0, 0.0, 0.0])
    pos, vel = torch.stack([x, torch.full_like(x, 5.0)], -1)[None], torch.stack([v, torch.zeros_like(v)], -1)[None]
    wind = torch.tensor([-0.4, 0.0]).expand(1, 6, 2)
    batch = WindowBatch(torch.zeros(1, 6, 6), pos, pos, vel, vel, torch.zeros(1, 6, 2), wind)
    g = torch.Generator().manual_seed(3)
    truth = torch.cat([torch.zeros(1, 5, 6), vel[:, :5], wind[:, :5]], -1).double()  # now, ahead, velocity, wind
    out = truth + 0.1 * torch.randn(1, 5, output_size(2), generator=g, dtype=torch.float64)
    residual = physics_residuals(Estimate.of(out, 2), batch, WALL).pow(2)
    assert (residual[0, 2:, :7] != 0).any(0).all()  # y stays off the wall: its persistence column is 0
    for start in (0, 2):
        want = (residual[:, start:, :6].sum(-1) + 40 * residual[:, start:, 6:].sum(-1)).mean() / 6
        torch.testing.assert_close(physics_loss(Estimate.of(out[:, start:], 2), batch, WALL, start), want.float())


def test_the_known_kinematics_replay_the_environment_at_every_row() -> None:
    """Every step of a windy rollout of random actions (which often meet the wall), in model units, is
    ``kinematic_step`` of the recorded state, command and disturbance: what the physics loss and the filters
    assume is what the simulator does."""
    rollouts = simulate(
        WINDY,
        SceneDistribution(target_ratio=2.0, range_min=40.0, range_max=50.0),
        RolloutSpec("train", envs=3, steps=40, seed=5),
        random_policy,
    )
    units = Units.of(WINDY, float(rollouts["side"]))
    pos, vel, accel, d = (rollouts[n] / units.of_target(n) for n in ("pos", "vel", "accel", "disturbance"))
    same = rollouts["episode"][:, 1:] == rollouts["episode"][:, :-1]
    next_pos, next_vel = kinematic_step(pos[:, :-1], vel[:, :-1], accel[:, :-1], d[:, :-1], units)
    torch.testing.assert_close(next_pos[same], pos[:, 1:][same], atol=1e-4, rtol=0)
    torch.testing.assert_close(next_vel[same], vel[:, 1:][same], atol=1e-4, rtol=0)
    assert on_wall(pos[:, 1:][same], units).sum() >= 20  # the wall is exercised


def line_batch(length: int, wind: tuple[float, float], noise: float, held: bool = False) -> WindowBatch:
    """8 UAVs from the arena's middle under a constant wind and small random commands (``held``: each UAV's
    first, throughout), positions observed with ``noise`` (model units, on ``WALL``)."""
    g = torch.Generator().manual_seed(0)
    accel = 0.2 * torch.randn(8, 1 if held else length, 2, generator=g).expand(8, length, 2).clone()
    d = torch.tensor(wind).expand(8, length, 2)
    pos, vel = torch.full((8, length, 2), 15.0), torch.zeros(8, length, 2)
    vel[:, 0] = 0.2 * torch.randn(8, 2, generator=g)
    for t in range(1, length):
        pos[:, t], vel[:, t] = kinematic_step(pos[:, t - 1], vel[:, t - 1], accel[:, t - 1], d[:, t - 1], WALL)
    pos_obs = pos + noise * torch.randn(pos.shape, generator=g)
    return WindowBatch(torch.zeros(8, length, 6), pos_obs, pos, vel, vel, accel, d.clone())


def hand_calibration(disturbance: bool, measurement: float, steps: int) -> Calibration:
    n = 7 if disturbance else 4
    mean, var = torch.zeros(n - 2, dtype=torch.float64), torch.full((n - 2,), 0.25, dtype=torch.float64)
    if disturbance:
        var[-1] = 1e-6  # no drag
    return Calibration(
        measurement, FLOOR * torch.eye(n, dtype=torch.float64), mean, var, torch.ones(steps, dtype=torch.float64)
    )


def test_the_known_kinematics_filter_predicts_a_windless_flight_exactly() -> None:
    """Without noise or wind, the command of each step is what the flight does: with the commands held
    (gains 1) the prediction of the last step ahead is exact once the velocity is known, and its
    disturbance estimate is zero."""
    batch = line_batch(24, (0.0, 0.0), noise=0.0, held=True)
    flt = KinematicFilter(WALL, hand_calibration(False, 1e-8, 3), 20)
    est = flt(batch)
    truth = future(batch.pos, 20, 3) - batch.pos_obs[:, :20, None]
    torch.testing.assert_close(est.ahead[:, 2:], truth[:, 2:], atol=1e-4, rtol=0)
    assert est.disturbance.abs().max() == 0


def test_the_kalman_filter_recovers_a_constant_wind() -> None:
    """Positions observed with noise 0.03 (a tenth of a full-speed step): from 20 steps on, the augmented
    filter's wind is within 0.06 of the truth (0.36) for every UAV and 0.02 on average, closer than after 5."""
    batch = line_batch(40, (0.3, -0.2), noise=0.03)
    est = KinematicFilter(WALL, hand_calibration(True, 0.03**2, 3), 40)(batch)
    error = (est.disturbance - batch.disturbance[:, :40]).norm(dim=-1)  # (8, 40)
    assert error[:, 20:].max() < 0.06 and error[:, 20:].mean() < 0.02
    assert error[:, 20:].mean() < error[:, 5].mean() / 2


def test_the_filters_calibrate_on_the_training_split(small_rollouts) -> None:
    units = Units.of(WINDY, float(small_rollouts["side"]))
    spec_noise = 0.01 / units.position  # RolloutSpec's default observation noise, in model units
    for disturbance in (True, False):
        calibration = calibrate(small_rollouts, units, WINDY, disturbance, predict_steps=3)
        assert abs(calibration.measurement**0.5 / spec_noise - 1) < 0.05
        assert calibration.command_gain[0] == 1 and calibration.command_gain.abs().max() <= 1
    # the filter without a disturbance state absorbs it as process noise on the velocity: r^2 E[d^2] or more
    kinematics = calibrate(small_rollouts, units, WINDY, False, predict_steps=3)
    d = small_rollouts["disturbance"] / units.accel
    assert kinematics.process[2:4, 2:4].trace() >= 0.9 * units.accel_ratio**2 * d.pow(2).sum(-1).mean()


def compose_dynamics(tmp_path: Path, *overrides: str):
    """The dynamics model at a test's budget: 4 training environments of 60 steps, a small TCN, 10 steps tuning
    each filter, its cache in ``tmp_path``."""
    return compose(
        "algorithm=dynamics",
        "logger=jsonl",
        f"data.cache_dir={tmp_path / 'cache'}",
        "algorithm.train_envs=4",
        "algorithm.eval_envs=2",
        "algorithm.rollout_steps=60",
        "algorithm.window=16",
        "algorithm.burn_in=4",
        "model.hidden=8",
        "model.layers=2",
        "hardware.batch_size=16",
        "train.log_every=5",
        "train.eval_every=10",
        "train.ckpt_every=10",
        "train.warmup_steps=0",
        "algorithm.filter_tuning_steps=10",
        *overrides,
    )


def test_rollouts_are_cached_by_content(tmp_path) -> None:
    cfg = compose_dynamics(tmp_path)
    first = load_rollouts(rollout_source(cfg), "train", scripted_planner, "scripted")
    again = load_rollouts(rollout_source(cfg), "train", scripted_planner, "scripted")
    assert torch.equal(first["pos_obs"], again["pos_obs"]) and first["pos"].shape == (4 * 4, 61, 2)
    assert len(list((tmp_path / "cache").glob("rollouts-train-*/manifest.json"))) == 1
    load_rollouts(rollout_source(cfg), "train", random_policy, "random")
    load_rollouts(
        rollout_source(compose_dynamics(tmp_path, "algorithm.noise=0.02")), "train", scripted_planner, "scripted"
    )
    assert len(list((tmp_path / "cache").glob("rollouts-train-*/manifest.json"))) == 3
    ood = load_rollouts(rollout_source(cfg), "test_ood", scripted_planner, "scripted")
    assert ood["disturbance"].norm(dim=-1).mean() > first["disturbance"].norm(dim=-1).mean()


def test_dynamics_settings_are_checked_before_any_work(tmp_path) -> None:
    with pytest.raises(ConfigError, match="algorithm.burn_in=15 must be below"):
        check_config(compose_dynamics(tmp_path, "algorithm.burn_in=15"))
    with pytest.raises(
        ConfigError,
        match="model=mlp with algorithm=dynamics: its networks are model=tcn or model=learned_filter or a "
        "TransformerGNN size",
    ):
        check_config(compose_dynamics(tmp_path, "model=mlp"))
    tcn_policy = compose("algorithm=imitation", "model=tcn")
    with pytest.raises(ConfigError, match="model=tcn with algorithm=imitation: its networks are a TransformerGNN size"):
        check_config(tcn_policy)
    with pytest.raises(ConfigError, match="rollout_policy='nope.pt' is not scripted, random or an environment"):
        check_config(compose_dynamics(tmp_path, "algorithm.rollout_policy=nope.pt"))


def test_a_resumed_dynamics_run_repeats_the_uninterrupted_one_and_reports(tmp_path) -> None:
    from uavgnn.modes.train import run_train

    a, b = straight_and_resumed(
        lambda steps: compose_dynamics(tmp_path, f"train.steps={steps}", "train.schedule=plateau"), tmp_path
    )
    for name, value in a["model"].items():
        torch.testing.assert_close(b["model"][name], value, rtol=0, atol=0)

    out = tmp_path / "full"
    gap = run_train(compose_dynamics(tmp_path, "train.steps=10"), out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best_val_k_step_rmse"] == pytest.approx(gap)
    methods = ["tcn", "ekf_tuned", "ekf_estimated", "kf_tuned", "kf_estimated", "constant_velocity"]
    assert [(r["split"], r["method"]) for r in summary["test"]] == [
        (split, m) for split in ("test", "test_ood") for m in methods
    ]
    for row in summary["test"]:  # every method: the k-step error is the last step's, each step's is reported
        assert row["k_step_rmse"] == row["step_5_rmse"] and all(f"step_{j}_rmse" in row for j in range(1, 6))
    assert summary["test/test_ood/ekf_tuned/disturbance_edge_rmse"] > 0 and "test/test/disturbance_rmse" in summary
    nees = {row["method"] for row in summary["test"] if "nees" in row}  # the filters have a covariance
    assert nees == {"ekf_tuned", "ekf_estimated", "kf_tuned", "kf_estimated"}
    assert (out / "predictions.png").stat().st_size > 0 and (out / "steps_ahead.png").stat().st_size > 0


def test_eval_of_a_learned_filter_repeats_its_test_table(tmp_path) -> None:
    """``model=learned_filter`` trains through the shared loop; ``mode=eval`` of its checkpoint gives the test
    phase's table again, row for row (the tuned filters read from the cache the run filled)."""
    from uavgnn.modes.evaluate import run_eval
    from uavgnn.modes.train import run_train

    out = tmp_path / "run"
    run_train(compose_dynamics(tmp_path, "model=learned_filter", "train.steps=10"), out)
    trained = json.loads((out / "summary.json").read_text())["test"]
    methods = ["learned_filter", "ekf_tuned", "ekf_estimated", "kf_tuned", "kf_estimated", "constant_velocity"]
    assert [row["method"] for row in trained] == methods * 2
    cfg = compose("mode=eval", f"ckpt={out / 'best.pt'}", "logger=jsonl", f"data.cache_dir={tmp_path / 'cache'}")
    run_eval(cfg, tmp_path / "eval")
    assert json.loads((tmp_path / "eval" / "eval.json").read_text())["rows"] == trained
    assert (tmp_path / "eval" / "steps_ahead.png").stat().st_size > 0


def test_profile_mode_names_the_bottleneck_of_a_dynamics_step(tmp_path) -> None:
    from uavgnn.modes.profile import STAGES, run_profile

    out = tmp_path / "profile"
    out.mkdir()
    report = run_profile(compose_dynamics(tmp_path, "profile.steps=4", "profile.warmup=1"), out)
    assert [s["stage"] for s in report["stages"]] == list(STAGES) and report["bottleneck"] in STAGES
    assert report["unit"] == "samples" and report["samples_per_s"] == pytest.approx(
        1000 * report["batch_size"] / report["step_ms"]
    )
    assert (out / "profile.png").stat().st_size > 0


def test_the_dataloader_path_gives_the_in_memory_batches(tmp_path) -> None:
    from uavgnn.algorithms.registry import make_algorithm

    batches = {}
    for loader in ("memory", "pyg"):
        cfg = compose_dynamics(tmp_path, f"hardware.loader={loader}")
        work = make_algorithm(cfg, torch.device("cpu")).workload(None)  # scripted rollouts
        work.restart(3, 16)
        batches[loader] = [work.batch(step, 0, 16) for step in (3, 4)]
    for a, b in zip(batches["memory"], batches["pyg"]):
        assert torch.equal(a.x, b.x) and torch.equal(a.pos, b.pos)


def test_a_masac_checkpoint_can_fly_the_rollouts(tmp_path) -> None:
    from uavgnn.algorithms.registry import make_algorithm, make_model
    from uavgnn.runs.checkpoints import save_checkpoint

    masac = compose("algorithm=masac", "model.hidden=8", "algorithm.critic_hidden=8")
    agents = make_model(masac)
    save_checkpoint(tmp_path / "best.pt", {"policy": agents.state_dict()}, masac)
    flown_by = f"algorithm.rollout_policy={tmp_path / 'best.pt'}"
    dynamics = make_algorithm(compose_dynamics(tmp_path, flown_by), torch.device("cpu"))
    policy, policy_id = dynamics.rollout_policy()
    env = UAVEnv(env_settings(dynamics.cfg), SceneDistribution(), 2, torch.device("cpu"), seed=0)
    torch.testing.assert_close(policy(env), agents.act(env.observe(), None, None))
    assert len(policy_id) == 64  # the checkpoint's SHA-256 names it in the cache key
    with pytest.raises(CheckpointError, match="needs an environment policy for 8 UAVs with"):
        make_algorithm(compose_dynamics(tmp_path, flown_by, "env.n_uav=8"), torch.device("cpu")).rollout_policy()
    for seeing in ("env.obs_target_velocity=true", "env.obs_scale=range"):  # other widths or units than it read
        with pytest.raises(CheckpointError, match="its UAVs observe .* this run's environment gives"):
            make_algorithm(compose_dynamics(tmp_path, flown_by, seeing), torch.device("cpu")).rollout_policy()
