"""``algorithm=dynamics``: an implicit-state TCN or the learned filter trained on trajectories, with a physics loss.

reference/004's model; ``model=learned_filter``: ``uavgnn.dynamics.learned_filter``.

The TCN's outputs at every row (``now``, ``ahead``, ``velocity``, ``disturbance``) and the known kinematics
(speed limit and wall included) are defined in ``uavgnn.dynamics.kinematics``.

data loss    = MSE(ahead, the observed future positions) + MSE(velocity, the measured velocity)
physics loss = the residuals of the known kinematics between the estimates at t and t+1 and between the
               estimate and the one-step prediction; on a row whose step the wall stops, the disturbance
               normal to it carried over from the row before (the wind is constant; the motion cannot say)
loss         = data + lambda_physics * physics

Nothing measures the disturbance: only the physics loss ties it to the motion,
which is what makes the hidden state identifiable; the test phase puts the TCN
beside Kalman filters that know the same kinematics (``uavgnn.dynamics.filters``), their settings estimated
and tuned on the TCN's loss (``uavgnn.dynamics.tuning``). Both losses
use observed quantities only; the true positions, velocities and disturbances
of the simulation score the model (``dynamics_metrics``). The data side is windows
of cached rollouts (``TrajectoryWorkload``), flown by ``rollout_policy``;
``mode=rollouts`` builds them ahead (``prepare``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from uavgnn.algorithms.base import Algorithm, AlgorithmConfig, Capabilities, Product, StepOutput, write_results
from uavgnn.algorithms.checkpoint_config import stored_config
from uavgnn.algorithms.env_policy import PRODUCT as ENV_POLICY
from uavgnn.algorithms.env_policy import load_env_policy
from uavgnn.algorithms.registry import describe, making, require
from uavgnn.config.settings import env_settings, loading, scene_distribution
from uavgnn.config.validation import AT_LEAST_1, NON_NEGATIVE, POSITIVE, ranged
from uavgnn.dynamics.filters import KinematicFilter, calibrate, neutral_calibration
from uavgnn.dynamics.kinematics import data_loss, estimate, output_size, physics_loss
from uavgnn.dynamics.learned_filter import LearnedFilter, corrected_outputs, network_inputs
from uavgnn.dynamics.rollouts import SPLITS, RolloutSource, RolloutSpec, load_rollouts
from uavgnn.dynamics.tuning import TuningSettings
from uavgnn.dynamics.windows import N_FEATURES, Units, WindowBatch, window_starts
from uavgnn.dynamics.workload import TrajectoryWorkload, WindowSettings
from uavgnn.envs.policies import Policy, random_policy, scripted_planner
from uavgnn.evaluation.dynamics import model_name, test_report
from uavgnn.infrastructure.console import echo
from uavgnn.infrastructure.errors import CheckpointError, ConfigError
from uavgnn.models.tcn import TCN, LearnedFilterConfig, TCNConfig
from uavgnn.models.transformer_gnn import TransformerGNNConfig
from uavgnn.reporting.figures import UP_TO_ONE, ZERO_UP, Compared, Curve, Score
from uavgnn.reporting.tables import format_table
from uavgnn.runs.checkpoints import load_checkpoint, load_weights


@dataclass
class DynamicsConfig(AlgorithmConfig):
    name: str = "dynamics"
    lambda_physics: float = ranged(0.5, NON_NEGATIVE)  # weight of the kinematic-residual loss (0: data loss only)
    rollout_policy: str = "scripted"  # who flies the rollouts: scripted | random | an environment policy checkpoint
    rollout_steps: int = ranged(200, AT_LEAST_1)  # steps per rollout environment (episodes auto-reset inside)
    train_envs: int = ranged(256, AT_LEAST_1)  # environments of the training split (x env.n_uav sequences)
    eval_envs: int = ranged(64, AT_LEAST_1)  # environments of each of val, test, test_ood
    noise: float = ranged(0.01, NON_NEGATIVE)  # std of the observed positions
    velocity_noise: float = ranged(0.02, NON_NEGATIVE)  # std of the measured velocity (a training label only)
    window: int = ranged(32, AT_LEAST_1)  # rows the TCN reads per training window
    predict_steps: int = ranged(5, AT_LEAST_1)  # future positions predicted at every row: the k of the k-step error
    burn_in: int = ranged(8, AT_LEAST_1)  # first rows of a window not scored (too little history)
    ood_scale: float = ranged(2.0, POSITIVE)  # test_ood: wind and drag x this (beyond anything seen in training)
    # steps of gradient descent fitting the baseline filters' settings on the TCN's loss (0: the estimated, rescaled)
    filter_tuning_steps: int = ranged(150, NON_NEGATIVE)


PRODUCT = Product("dynamics model", "mode=eval takes it; resume=auto hydra.run.dir=<its run> trains it on")


def rollout_source(cfg: Any) -> RolloutSource:
    """The four splits of the run (train / val / test, and test_ood with stronger disturbances) in its
    environment, its scenes and its cache."""
    alg, data = cfg.algorithm, cfg.data
    common = {"steps": alg.rollout_steps, "noise": alg.noise, "velocity_noise": alg.velocity_noise}
    specs = {
        "train": RolloutSpec("train", alg.train_envs, seed=data.train_seed, **common),
        "val": RolloutSpec("val", alg.eval_envs, seed=data.val_seed, **common),
        "test": RolloutSpec("test", alg.eval_envs, seed=data.test_seed, **common),
        "test_ood": RolloutSpec(
            "test_ood", alg.eval_envs, seed=data.test_seed + 1, disturbance_scale=alg.ood_scale, **common
        ),
    }
    return RolloutSource(env_settings(cfg), scene_distribution(cfg), specs, data.cache_dir)


class Dynamics(Algorithm):
    """Data + lambda_physics x physics loss of a window batch, scored from row ``burn_in`` on."""

    name = "dynamics"
    timed_by = "mode=profile (steps on its trajectory windows)"
    config = DynamicsConfig
    produces = PRODUCT
    # a TCN (model=tcn), or a TransformerGNN size for its width and depth
    capabilities = Capabilities(
        models={"tcn": TCNConfig, "learned_filter": LearnedFilterConfig, "transformer_gnn": TransformerGNNConfig}
    )
    score = Score("val/k_step_rmse")
    reads = ("task", "env", "data")
    # the TCN's k-step error in and out of the training disturbances, and the share of constant velocity's it removes
    compared = Compared(
        (
            Score("best_val_k_step_rmse", label="best val. k-step RMSE", bounds=ZERO_UP),
            Score("test/test/k_step_rmse", label="test k-step RMSE", bounds=ZERO_UP),
            Score("test/test_ood/k_step_rmse", label="test k-step RMSE, other disturbances", bounds=ZERO_UP),
            Score(
                "test/test/vs_constant_velocity",
                minimize=False,
                label="test error removed vs constant velocity",
                percent=True,
                bounds=UP_TO_ONE,
            ),
            Score("test/test/disturbance_rmse", label="test disturbance RMSE", bounds=ZERO_UP),
            Score("samples_per_s", minimize=False, label="samples/s", bounds=ZERO_UP),
            Score("peak_mem_mb", label="peak memory (MB)", bounds=ZERO_UP),
        ),
        (
            "best_val_k_step_rmse",
            "test/test/k_step_rmse",
            "test/test_ood/k_step_rmse",
            "test/test/vs_constant_velocity",
        ),
        Curve("val/k_step_rmse", "val k-step RMSE"),
        Curve("perf/samples_per_s", "samples/s"),
    )

    @classmethod
    def check(cls, cfg: Any) -> None:
        """The window arithmetic, the rollouts it reads, a model with a width and a depth (not the MLP)."""
        alg = cfg.algorithm
        if alg.burn_in >= alg.window - 1:
            raise ConfigError(
                f"algorithm.burn_in={alg.burn_in} must be below algorithm.window - 1 = {alg.window - 1} "
                "(rows left to score)"
            )
        if alg.window + alg.predict_steps > alg.rollout_steps + 1:
            raise ConfigError(
                f"algorithm.window + algorithm.predict_steps = {alg.window + alg.predict_steps} rows do "
                f"not fit in algorithm.rollout_steps + 1 = {alg.rollout_steps + 1}"
            )
        if alg.rollout_policy not in ("scripted", "random") and not Path(alg.rollout_policy).is_file():
            raise ConfigError(
                f"algorithm.rollout_policy={alg.rollout_policy!r} is not scripted, random or an "
                f"environment policy's checkpoint file ({making(ENV_POLICY)})"
            )
        if cfg.task.positions == "mixed":
            raise ConfigError(
                "task=mixed with algorithm=dynamics: the environment has one scene size and square for "
                "all its envs; use task=uniform or task=clustered"
            )

    @classmethod
    def build_model(cls, cfg: Any) -> nn.Module:
        """The TCN; or the learned filter, its filter's settings set by ``workload`` (or a checkpoint)."""
        alg, model, k = cfg.algorithm, cfg.model, cfg.algorithm.predict_steps
        if model.name != LearnedFilterConfig.name:
            return TCN(N_FEATURES, output_size(k), model.hidden, model.layers, model.dropout)
        network = TCN(network_inputs(k), corrected_outputs(k), model.hidden, model.layers, model.dropout)
        settings = env_settings(cfg)
        units = Units.of(settings, scene_distribution(cfg).side(settings.n_uav))
        filters = [KinematicFilter(units, neutral_calibration(True, k), alg.window) for _ in range(2)]
        return LearnedFilter(*filters, network, network.out)

    def __init__(self, cfg: Any, device: torch.device) -> None:
        super().__init__(cfg, device)
        alg = cfg.algorithm
        self.source = rollout_source(cfg)
        settings = self.source.settings
        self.units, self.window, self.k = (
            Units.of(settings, self.source.dist.side(settings.n_uav)),
            alg.window,
            alg.predict_steps,
        )
        self.burn_in, self.lambda_physics = alg.burn_in, alg.lambda_physics

    def workload(self, model: nn.Module) -> TrajectoryWorkload:
        """The trajectory windows; a learned filter's filters take their settings from the training split here:
        the estimated EKF's (its reference), and the tuned EKF's (its base: the same tuning as the test table's,
        from the cache after the first run of a seed)."""
        windows = WindowSettings(self.window, self.burn_in, self.k)
        work = TrajectoryWorkload(
            self.source, windows, self.cfg.seed, loading(self.cfg), self.device, self.rollout_policy()
        )
        if isinstance(model, LearnedFilter):
            estimated = calibrate(work.load("train"), self.units, work.settings, True, self.k)
            model.reference.set_calibration(estimated)
            tuning = TuningSettings(self.cfg.algorithm.filter_tuning_steps)
            tuned = work.tuned(KinematicFilter(self.units, estimated, self.window), "ekf", tuning)
            model.filter.load_state_dict(tuned.state_dict())
        return work

    def rollout_policy(self) -> tuple[Policy, str]:
        """Who flies the rollouts, and what identifies it in their cache key: ``scripted``, ``random`` or an
        environment policy's checkpoint (by its SHA-256) for the same number of UAVs and action mode."""
        name, settings = self.cfg.algorithm.rollout_policy, env_settings(self.cfg)
        if name in ("scripted", "random"):
            return {"scripted": scripted_planner, "random": random_policy}[name], name
        policy, config = load_env_policy(name, "algorithm.rollout_policy")
        if config.env.n_uav != settings.n_uav or config.env.action != settings.action:
            raise CheckpointError(
                f"algorithm.rollout_policy={name}: needs an environment policy for "
                f"{settings.n_uav} UAVs with {settings.action} actions, got algorithm="
                f"{config.algorithm.name} with env.n_uav={config.env.n_uav}, "
                f"env.action={config.env.action}"
            )
        sees, given = env_settings(config).observation(), settings.observation()
        if sees != given:  # its networks would misread this run's observations
            raise CheckpointError(
                f"algorithm.rollout_policy={name}: its UAVs observe {sees}, this run's environment gives {given}: "
                "set the env keys it was trained with"
            )
        return policy, hashlib.sha256(Path(name).read_bytes()).hexdigest()

    def training_step(self, model: nn.Module, batch: WindowBatch, draws: None) -> StepOutput:
        w, b = self.window, self.burn_in
        est = estimate(model, batch, w, self.k, start=b)  # rows b.. only: the burn-in is never scored
        data, physics = data_loss(est, batch, w, b), physics_loss(est, batch, self.units, b)
        return StepOutput(
            data + self.lambda_physics * physics,
            {"data_loss": data.detach(), "physics_loss": physics.detach()},
            torch.full((), float(len(batch) * (w - b)), device=batch.x.device),  # a fill, not a host copy: capturable
        )

    def test(self, result: Any, out_dir: Path, logger: Any) -> float:
        """The best model against the filters (estimated and tuned) and constant velocity on the test splits (in
        and out of the training disturbances): the table of every horizon, and the pictures
        (``uavgnn.evaluation.dynamics.test_report``)."""
        alg = self.cfg.algorithm
        report = test_report(result.model, result.workload, TuningSettings(alg.filter_tuning_steps), out_dir)
        echo(f"\nTest rollouts ({alg.rollout_policy} policy; test_ood: wind and drag x{alg.ood_scale})\n{report.text}")
        for key, path in report.pictures.items():
            logger.log_image(key, path, result.state.step)
        return write_results(result, out_dir, logger, report.rows, report.figures(model_name(result.model)))

    def prepare(self) -> list[dict[str, Any]]:
        """``mode=rollouts``: every split simulated (or found in the cache), one row each."""
        cfg, alg = self.cfg, self.cfg.algorithm
        policy = self.rollout_policy()
        rows = []
        for split in SPLITS:
            payload = load_rollouts(self.source, split, *policy)
            episode = payload["episode"]
            rows.append(
                {
                    "split": split,
                    "sequences": episode.shape[0],
                    "rows": episode.shape[1],
                    "episodes": int((episode[:, -1] + 1).sum()) // cfg.env.n_uav,
                    "windows": len(window_starts(episode, alg.window + alg.predict_steps)),
                    "disturbance_rms": float(payload["disturbance"].norm(dim=-1).pow(2).mean().sqrt()),
                    "speed_mean": float(payload["vel"].norm(dim=-1).mean()),
                }
            )
        echo(
            f"rollouts of the {alg.rollout_policy} policy ({cfg.env.n_uav} UAVs, env={cfg.env.name}) in "
            f"{cfg.data.cache_dir}\n" + format_table(rows)
        )
        return rows


def load_dynamics_model(
    path: str | Path, taker: str, device: torch.device, cache_dir: str
) -> tuple[nn.Module, TrajectoryWorkload, Any]:
    """A dynamics checkpoint's model (its kept weights, in eval mode), its trajectory windows (the rollouts
    found in, or simulated into, ``cache_dir``) and its config on this version's schemas; ``taker`` names what
    asked (for the errors)."""
    ckpt = load_checkpoint(path, device)
    algorithm = require(ckpt, path, PRODUCT, taker)
    config = stored_config(ckpt["config"])
    config.data.cache_dir = cache_dir
    model = algorithm.build_model(config).to(device)
    work = algorithm(config, device).workload(model)  # before the weights: a learned filter's start is overwritten
    load_weights(model, ckpt["policy"], path, describe(ckpt["config"]))
    return model.eval(), work, config
