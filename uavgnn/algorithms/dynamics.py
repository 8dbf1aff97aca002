"""``algorithm=dynamics``: an implicit-state TCN trained on trajectories, with a physics loss (reference/004).

The TCN's outputs at every row (``now``, ``ahead``, ``velocity``, ``disturbance``) and the known kinematics
(speed limit and wall included) are defined in ``uavgnn.dynamics.kinematics``.

data loss    = MSE(ahead, the observed future positions) + MSE(velocity, the measured velocity)
physics loss = the residuals of the known kinematics between the estimates at t and t+1 and between the
               estimate and the one-step prediction; on a row whose step the wall stops, the disturbance
               normal to it carried over from the row before (the wind is constant; the motion cannot say)
loss         = data + lambda_physics * physics

Nothing measures the disturbance: only the physics loss ties it to the motion,
which is what makes the hidden state identifiable; the test phase puts the TCN
beside a Kalman filter that knows the same kinematics (``uavgnn.dynamics.filters``). Both losses
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
import torch.nn.functional as F
from torch import nn

from uavgnn.algorithms.base import Algorithm, AlgorithmConfig, Capabilities, Product, StepOutput, write_results
from uavgnn.algorithms.env_policy import PRODUCT as ENV_POLICY
from uavgnn.algorithms.env_policy import load_env_policy
from uavgnn.algorithms.registry import making
from uavgnn.config.settings import env_settings, loading, scene_distribution
from uavgnn.config.validation import AT_LEAST_1, NON_NEGATIVE, POSITIVE, ranged
from uavgnn.dynamics.kinematics import estimate, future, output_size, physics_loss
from uavgnn.dynamics.rollouts import SPLITS, RolloutSource, RolloutSpec, load_rollouts
from uavgnn.dynamics.windows import N_FEATURES, Units, WindowBatch, window_starts
from uavgnn.dynamics.workload import TrajectoryWorkload, WindowSettings
from uavgnn.envs.policies import Policy, random_policy, scripted_planner
from uavgnn.evaluation.dynamics import compare_on_test, predictions, scoring_methods
from uavgnn.infrastructure.console import echo
from uavgnn.infrastructure.errors import CheckpointError, ConfigError
from uavgnn.models.tcn import TCN, TCNConfig
from uavgnn.models.transformer_gnn import TransformerGNNConfig
from uavgnn.reporting.dynamics_pictures import plot_predictions, plot_steps_ahead
from uavgnn.reporting.figures import UP_TO_ONE, ZERO_UP, Compared, Curve, Score
from uavgnn.reporting.tables import format_table
from uavgnn.runs.layout import PREDICTIONS_PICTURE, STEPS_AHEAD_PICTURE


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
    produces = Product("dynamics model", "resume=auto hydra.run.dir=<its run> takes it")
    # a TCN (model=tcn), or a TransformerGNN size for its width and depth
    capabilities = Capabilities(models={"tcn": TCNConfig, "transformer_gnn": TransformerGNNConfig})
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
    def build_model(cls, cfg: Any) -> TCN:
        return TCN(
            N_FEATURES, output_size(cfg.algorithm.predict_steps), cfg.model.hidden, cfg.model.layers, cfg.model.dropout
        )

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
        windows = WindowSettings(self.window, self.burn_in, self.k)
        return TrajectoryWorkload(
            self.source, windows, self.cfg.seed, loading(self.cfg), self.device, self.rollout_policy()
        )

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
        target = future(batch.pos_obs, w, self.k)[:, b:] - batch.pos_obs[:, b:w, None]
        position = F.mse_loss(est.ahead.float(), target.float())
        velocity = F.mse_loss(est.velocity.float(), batch.vel_obs[:, b:w].float())
        physics = physics_loss(est, batch, self.units, b)
        data = position + velocity
        return StepOutput(
            data + self.lambda_physics * physics,
            {"data_loss": data.detach(), "physics_loss": physics.detach()},
            torch.full((), float(len(batch) * (w - b)), device=batch.x.device),  # a fill, not a host copy: capturable
        )

    def test(self, result: Any, out_dir: Path, logger: Any) -> float:
        """The best TCN against the model-based baselines (a Kalman filter with the disturbance in its state,
        the known kinematics) and constant velocity on the test splits (in and out of the training
        disturbances): the table, the error at each step ahead, and the predicted-vs-true picture."""
        alg, work = self.cfg.algorithm, result.workload
        methods = scoring_methods(result.model, work)  # the filters calibrated once, for the table and picture
        rows = compare_on_test(result.model, work, methods)
        steps = [key for key in rows[0] if key.startswith("step_")]
        echo(
            f"\nTest rollouts ({alg.rollout_policy} policy; test_ood: wind and drag x{alg.ood_scale})\n"
            + format_table(rows, [key for key in rows[0] if key not in steps])
            + "\n\nPosition error by steps ahead\n"
            + format_table(rows, ["split", "method", *steps])
        )
        logger.log_image(
            "test/predictions",
            plot_predictions(predictions(result.model, work, methods, "test_ood"), out_dir / PREDICTIONS_PICTURE),
            result.state.step,
        )
        logger.log_image("test/steps_ahead", plot_steps_ahead(rows, out_dir / STEPS_AHEAD_PICTURE), result.state.step)
        test = {
            f"test/{row['split']}/{'' if row['method'] == 'tcn' else row['method'] + '/'}{key}": value
            for row in rows
            for key, value in row.items()
            if isinstance(value, float)
        }
        return write_results(result, out_dir, logger, rows, test)

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
