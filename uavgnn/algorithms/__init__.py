"""Training objectives that plug into the shared loop: ``algorithm=imitation|reinforce|masac|coma|dynamics``.

To add one: a file here with a subclass of ``Algorithm`` (see ``base.py``),
an entry in ``make_algorithm``, a ``conf/algorithm/<name>.yaml`` and its name
in ``uavgnn.validation.CHOICES``.
"""

from __future__ import annotations

import torch
from torch import nn

from uavgnn.algorithms.base import Algorithm, LossOf, StepOutput, step_loss
from uavgnn.algorithms.coma import COMA, COMAAgents, COMASettings
from uavgnn.algorithms.dynamics import Dynamics, output_size
from uavgnn.algorithms.imitation import Imitation
from uavgnn.algorithms.masac import MASAC, MASACAgents, MASACSettings
from uavgnn.algorithms.reinforce import Reinforce
from uavgnn.config import env_settings, scene_distribution
from uavgnn.dynamics.windows import N_FEATURES, Units
from uavgnn.models import model_from_config
from uavgnn.models.tcn import TCN

__all__ = ["Algorithm", "LossOf", "StepOutput", "make_algorithm", "make_model", "step_loss"]


def make_model(cfg) -> nn.Module:
    """What ``cfg.algorithm`` trains: the TransformerGNN policy, MASAC's or COMA's agents sized by the environment, or
    the dynamics TCN (width and depth from ``model.hidden``/``model.layers``)."""
    if cfg.algorithm.name == "coma":
        env, dist, alg = env_settings(cfg.env), scene_distribution(cfg.task), cfg.algorithm
        return COMAAgents(COMASettings(env.n_uav, env.obs_dim(), env.state_dim(dist), env.action_dim(),
                                       cfg.model.hidden, cfg.model.layers, alg.critic_hidden, alg.critic_layers,
                                       alg.gamma, alg.td_lambda, alg.entropy_coef))
    if cfg.algorithm.name == "dynamics":
        return TCN(N_FEATURES, output_size(cfg.algorithm.predict_steps), cfg.model.hidden, cfg.model.layers,
                   cfg.model.dropout)
    if cfg.algorithm.name == "masac":
        env, dist, alg = env_settings(cfg.env), scene_distribution(cfg.task), cfg.algorithm
        graph = (None if cfg.model.name == "mlp"
                 else (env.obs_targets, env.obs_uavs, cfg.model.heads, cfg.model.ffn_mult))
        return MASACAgents(MASACSettings(env.n_uav, env.obs_dim(), env.state_dim(dist), env.action_dim(),
                                         cfg.model.hidden, cfg.model.layers, alg.critic_hidden, alg.critic_layers,
                                         alg.gamma, alg.init_alpha, graph))
    return model_from_config(cfg.model, cfg.optim.grad_checkpoint, cfg.optim.checkpoint_layers)


def make_algorithm(cfg, device: torch.device) -> Algorithm:
    """The configured ``algorithm.name`` with its settings."""
    if cfg.algorithm.name == "imitation":
        return Imitation()
    if cfg.algorithm.name == "reinforce":
        return Reinforce(cfg.algorithm.samples, cfg.algorithm.imitation_weight, cfg.seed, device,
                         cfg.algorithm.baseline, cfg.algorithm.entropy_coef, cfg.algorithm.temperature)
    if cfg.algorithm.name == "masac":
        alg = cfg.algorithm
        return MASAC(alg.tau, alg.actor_lr_scale, alg.alpha_lr_scale, cfg.seed, device)
    if cfg.algorithm.name == "coma":
        return COMA(cfg.algorithm.target_update_every, cfg.algorithm.actor_lr_scale)
    if cfg.algorithm.name == "dynamics":
        alg = cfg.algorithm
        return Dynamics(Units.of(env_settings(cfg.env)), alg.window, alg.predict_steps, alg.burn_in,
                        alg.lambda_physics)
    raise ValueError(f"algorithm.name: unknown algorithm {cfg.algorithm.name!r} (expected imitation, reinforce, "
                     "masac, coma or dynamics)")
