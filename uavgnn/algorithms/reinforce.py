"""``algorithm=reinforce``: fine-tuning on the true all-or-nothing reward, each rollout against the others.

Imitation learns the MILP's choices UAV by UAV, but what the user is scored on
is J: a target one UAV short earns nothing, and the greedy decoder turns
near-ties of the imitation policy into such losses. Fine-tuning follows the
policy gradient of J instead (Kool et al., "Attention, Learn to Solve Routing
Problems!", with the current policy as its own baseline policy):

- rollouts: S - 1 assignments drawn exactly from the factorised policy (each
  UAV independently picks idle or a candidate with its probability), scored
  by the true reward J, over-assigned and partial targets included; with
  ``algorithm.temperature`` T < 1 from the sharpened policy ``pi^(1/T)``
  (renormalised per UAV), whose greedy decode is the same: independent
  per-UAV samples rarely complete a target together (few of them beat the
  greedy decode at T = 1, BENCHMARKS.md), samples nearer the greedy decode
  more often do, and the gradient is that of the sharpened policy's E[J];
- baseline (``algorithm.baseline``): ``mean`` (the default), the mean J of the
  scene's other samples, POMO's shared baseline; or ``greedy``, J of the greedy
  decode of the same scores (what is deployed; Kool et al.'s rollout baseline).
  Against the others' mean the step decodes nothing: no data-dependent loop,
  no host sync, far fewer ops a step, and test gaps within a standard
  deviation of the greedy rollout's (BENCHMARKS.md);
- loss: ``-(J(a) - b) * sum_i log pi_i(a_i)``, with advantages in
  units of the scene's total target value (scenes of every size weigh alike)
  and log-probabilities averaged per UAV, minus ``algorithm.entropy_coef``
  (0.01 in the preset) times the mean per-UAV entropy: without it the policy
  sharpens until its samples stop differing from the greedy decode and the
  validation gap drifts up (BENCHMARKS.md).

Validation and ``best.pt`` use the greedy decode, what is deployed, never the
samples. With the greedy baseline it is also rollout 0 of every batch
(``train/greedy_reward`` is what would be shipped) and a sample counts as better
only when it beats it; with the mean, ``train/sample_reward`` is the samples' J.

Because the rollouts are exact samples the estimator is unbiased whatever the
baseline. (Sampling through the greedy decoder instead - Gumbel-perturbed
decodes - was tried first: the factorised log-probability is then a biased
surrogate, and on the dev preset it flattened the policy and raised the
validation gap within a few hundred steps.) The sampled objective is not
the greedy-decoded one, so the validation gap improves for a few hundred steps
and then drifts (measured in BENCHMARKS.md): best.pt keeps the best policy,
and ``imitation_weight`` keeps the MILP's labels in the loss as an anchor.
Rewards are computed from the batch's own tensors on the device (need, value
per slot and travel cost per candidate are graph features), without the scenes.
A refining model (``model.refine_rounds``) is trained on every round's policy,
each against its own baseline (``uavgnn.inference.refinement``).
The data, validation and test phase are those of every assignment policy
(``scene_policy.py``); with ``imitation_weight=0`` it trains on fresh,
unlabelled scenes too (``data.source=generated``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch_geometric.data import Batch

from uavgnn.algorithms.base import Phase, StepOutput
from uavgnn.algorithms.scene_policy import ScenePolicy, ScenePolicyConfig, SceneWorkload, batch_imitation_loss
from uavgnn.config.validation import AT_LEAST_1, NON_NEGATIVE, POSITIVE, ranged
from uavgnn.inference.decoders import argmax_decode, fixed_round_greedy, greedy_decode, gumbel_noise
from uavgnn.inference.refinement import policy_rounds
from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.infrastructure.randomness import stream
from uavgnn.models.choices import choice_log_probs, imitation_loss, policy_entropy
from uavgnn.problem.graphs import COST_COLUMN, VALUE_COLUMN, VALUE_SCALE, kept_size, unsquash


def _per_graph(values: torch.Tensor, graph: torch.Tensor, n_graphs: int) -> torch.Tensor:
    """Sum of ``values`` (S, E) over each element's graph: (S, n_graphs)."""
    return values.new_zeros(values.shape[0], n_graphs).index_add_(1, graph, values)


def rollout_rewards(batch: Batch, keep: torch.Tensor, choice: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(reward J (S, G) of every rollout of every scene, total target value (G,) of each scene).

    ``choice`` (S, num_nodes) holds each UAV's chosen target node (-1 idle), as the decoders return it.
    """
    cand_uav, cand_target = batch.cand_index[0, keep], batch.cand_index[1, keep]
    per_slot = unsquash(batch.x[:, VALUE_COLUMN].float(), VALUE_SCALE)  # value / need on target nodes
    is_target = batch.need > 0
    value = torch.where(is_target, per_slot * batch.need, torch.zeros_like(per_slot))
    travel = unsquash(batch.cand_attr[keep, COST_COLUMN].float(), 1.0) * per_slot[cand_target]  # lam * dist
    chosen = (choice[:, cand_uav] == cand_target).float()  # (S, C)
    count = torch.zeros_like(choice, dtype=torch.float).index_add_(1, cand_target, chosen)
    completed = (count >= batch.need) & is_target
    n_graphs = batch.num_graphs
    reward = _per_graph(completed.float() * value, batch.batch, n_graphs) - _per_graph(
        chosen * travel, batch.batch[cand_uav], n_graphs
    )
    total_value = _per_graph(value[None], batch.batch, n_graphs)[0]
    return reward, total_value


Noise = tuple[torch.Tensor, torch.Tensor]  # Gumbel noise of the rollouts' candidates and nodes, flat


def rollout_noise(
    generator: torch.Generator | None, samples: int, n_cand: int, n_nodes: int, device: torch.device
) -> Noise:
    """The Gumbel noise of ``samples`` rollouts of a batch of ``n_cand`` kept candidates and ``n_nodes`` nodes."""
    return (gumbel_noise(samples * n_cand, generator, device), gumbel_noise(samples * n_nodes, generator, device))


def policy_samples(
    batch: Batch, cand_logp: torch.Tensor, idle_logp: torch.Tensor, keep: torch.Tensor, samples: int, noise: Noise
) -> torch.Tensor:
    """(samples, num_nodes) choices drawn exactly from the factorised policy: each UAV independently picks
    idle or a candidate with its probability (Gumbel-max on ``noise``, ``rollout_noise``), target nodes as
    the decoders return them."""
    cand_uav, cand_target = batch.cand_index[0, keep], batch.cand_index[1, keep]
    n, c = idle_logp.numel(), cand_uav.numel()  # (batch.num_nodes: a property TorchDynamo cannot trace here)
    shift = torch.arange(samples, device=cand_uav.device)
    choice = argmax_decode(
        cand_logp.detach().repeat(samples) + noise[0],
        idle_logp.detach().repeat(samples) + noise[1],
        cand_uav.repeat(samples) + shift.repeat_interleave(c) * n,
        cand_target.repeat(samples) + shift.repeat_interleave(c) * n,
    ).view(samples, n)
    return torch.where(choice >= 0, choice - (shift * n)[:, None], choice)


def advantages(reward: torch.Tensor, baseline: str) -> torch.Tensor:
    """(S', G) advantages of the sampled rollouts of ``reward``.

    ``greedy``: row 0 of ``reward`` is the greedy decode, the others are sampled: each minus the greedy decode's
    reward (what is deployed). ``mean``: every row is sampled, each minus the mean reward of the scene's *other*
    samples (POMO's shared baseline, leave-one-out so it stays unbiased; Kool et al., "Buy 4 REINFORCE samples,
    get a baseline for free"): the advantages of a scene sum to zero, and no greedy decode is needed.
    """
    if baseline == "greedy":
        return reward[1:] - reward[:1]
    if baseline == "mean":
        n = reward.shape[0]
        if n < 2:
            raise ValueError("algorithm.baseline=mean needs algorithm.samples >= 3 (two sampled rollouts)")
        return reward - (reward.sum(0, keepdim=True) - reward) / (n - 1)
    raise ValueError(f"algorithm.baseline: unknown baseline {baseline!r} (expected 'greedy' or 'mean')")


@dataclass
class ReinforceConfig(ScenePolicyConfig):
    name: str = "reinforce"
    samples: int = ranged(8, AT_LEAST_1)  # rollouts per scene: samples - 1 drawn (+ the greedy decode: baseline=greedy)
    imitation_weight: float = ranged(0.0, NON_NEGATIVE)  # weight of the imitation loss kept alongside (0: pure)
    baseline: str = "mean"  # mean: the mean J of the scene's other samples (POMO) | greedy: the greedy decode's J
    entropy_coef: float = ranged(0.01, NON_NEGATIVE)  # entropy bonus (per UAV, nats): 2.2% vs 3.8% test gap without
    temperature: float = ranged(1.0, POSITIVE)  # rollouts from pi^(1/T) renormalised per UAV (T < 1: nearer greedy)
    imitation_steps: int = ranged(0, NON_NEGATIVE)  # first imitate the MILP labels this many steps, in this run
    imitation_lr: float = ranged(3e-3, POSITIVE)  # the imitation phase's peak LR (train.lr is REINFORCE's)
    imitation_warmup: int = ranged(50, NON_NEGATIVE)  # the imitation phase's LR warmup steps


def reinforce_loss(
    model: nn.Module,
    batch: Batch,
    samples: int,
    draws: torch.Generator | Noise | None = None,
    imitation_weight: float = 0.0,
    baseline: str = "mean",
    entropy_coef: float = 0.0,
    temperature: float = 1.0,
    greedy_rounds: int | None = None,
    dense_max_nodes: int = 0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    """(policy-gradient loss, stats, number of UAVs) of a batch at its candidate budget ``batch.k``;
    ``baseline``: see ``advantages``; ``entropy_coef`` weighs the entropy bonus; rollouts come from the policy
    at ``temperature`` (the defaults: plain REINFORCE against the other samples' mean), with the noise ``draws``
    (``rollout_noise``'s, or drawn here from a generator); with ``greedy_rounds`` the
    greedy rollout is decoded in that many fixed-shape rounds (``fixed_round_greedy``: no host sync), otherwise
    by ``greedy_decode``'s loop (``baseline=mean`` decodes none); ``dense_max_nodes``: see ``policy_log_probs``.
    A refining model's loss is summed over its rounds (``policy_rounds``), each against its own baseline, with
    the same noise.

    stats (of the last round): with the greedy baseline ``advantage`` (mean of the sampled rollouts' reward minus
    the greedy one, per unit of scene value), ``better`` (share of sampled rollouts beating greedy) and
    ``greedy_reward`` (greedy J per unit of scene value); with the mean baseline ``sample_reward`` (the sampled
    rollouts' mean J per unit of scene value); ``entropy`` (mean per-UAV policy entropy, nats); with ``greedy_rounds``,
    ``greedy_converged`` (1 when the greedy rollout reached its fixed point within them; an unconverged one still
    makes an unbiased baseline, as any baseline the samples do not depend on, but is not exactly what would be
    deployed). With ``imitation_weight`` > 0 the NLL of the MILP's labels is added, keeping the policy near the
    exact solver's choices while it is tuned on J.
    """
    if samples < 2:
        raise ValueError(f"algorithm.samples={samples}: REINFORCE needs at least one sampled rollout (samples - 1)")
    policies = policy_rounds(model, batch, batch.k, dense_max_nodes=dense_max_nodes, greedy_rounds=greedy_rounds)
    keep = policies[-1][2]
    if not isinstance(draws, tuple):
        draws = rollout_noise(draws, samples - 1, keep.numel(), batch.num_nodes, keep.device)
    total = None
    for policy in policies:
        loss, stats, n_uav = rollout_loss(
            batch, policy, samples, draws, imitation_weight, baseline, entropy_coef, temperature, greedy_rounds
        )
        total = loss if total is None else total + loss
    return total, stats, n_uav


def rollout_loss(
    batch: Batch,
    policy: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    samples: int,
    draws: Noise,
    imitation_weight: float,
    baseline: str,
    entropy_coef: float,
    temperature: float,
    greedy_rounds: int | None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    """``reinforce_loss`` of one policy (``policy_log_probs``'s triple)."""
    cand_logp, idle_logp, keep = policy
    cand_uav, cand_target = batch.cand_index[0, keep], batch.cand_index[1, keep]
    sample_cand, sample_idle = cand_logp, idle_logp  # the sampling policy: pi, or pi^(1/T) renormalised
    if temperature != 1.0:
        sample_cand, sample_idle = choice_log_probs(cand_logp / temperature, idle_logp / temperature, cand_uav)
    sampled = policy_samples(batch, sample_cand, sample_idle, keep, samples - 1, draws)  # (S - 1, num_nodes)
    converged = None
    if baseline == "greedy":  # rollout 0: the greedy decode of the same scores
        if greedy_rounds is None:
            greedy = greedy_decode(cand_logp.detach(), cand_uav, cand_target, batch.need)
        else:
            greedy, converged = fixed_round_greedy(
                cand_logp.detach(), cand_uav, cand_target, batch.need, batch.batch, batch.num_graphs, greedy_rounds
            )
        reward, total_value = rollout_rewards(batch, keep, torch.cat([greedy[None], sampled]))
    else:
        reward, total_value = rollout_rewards(batch, keep, sampled)
    scale = total_value.clamp(min=1e-6)
    advantage = advantages(reward, baseline) / scale  # (S - 1, G), in units of the scene's total value

    is_uav = batch.node_type == 0
    chosen = sampled[:, cand_uav] == cand_target
    idle = (sampled < 0) & is_uav
    n_graphs = batch.num_graphs
    log_prob = _per_graph(
        torch.where(chosen, sample_cand, torch.zeros_like(sample_cand)), batch.batch[cand_uav], n_graphs
    ) + _per_graph(torch.where(idle, sample_idle, torch.zeros_like(sample_idle)), batch.batch, n_graphs)
    n_uav = _per_graph(is_uav.float()[None], batch.batch, n_graphs)[0].clamp(min=1)
    loss = -(advantage.detach() * log_prob / n_uav).mean()
    if imitation_weight > 0:
        nll, _, _ = imitation_loss(cand_logp, idle_logp, cand_uav, batch.cand_label[keep], batch.busy, is_uav)
        loss = loss + imitation_weight * nll
    entropy = policy_entropy(sample_cand, sample_idle, cand_uav, is_uav)
    if entropy_coef > 0:
        loss = loss - entropy_coef * entropy
    if baseline == "greedy":
        stats = {
            "advantage": advantage.mean().detach(),
            "better": (reward[1:] > reward[:1]).float().mean(),
            "greedy_reward": (reward[0] / scale).mean(),
        }
    else:  # the advantages sum to zero: the samples' own reward says how the policy does
        stats = {"sample_reward": (reward / scale).mean()}
    stats["entropy"] = entropy.detach()
    if converged is not None:
        stats["greedy_converged"] = converged
    return loss, stats, is_uav.sum()


class Reinforce(ScenePolicy):
    """``reinforce_loss`` with rollouts drawn from their own stream of (seed, step, rank): resumable exactly.

    With ``algorithm.imitation_steps`` N > 0 (the main job, ``algorithm=imitation_reinforce``) the run has two
    phases: N steps of imitation of the MILP labels of the cached training split (``algorithm=imitation``'s
    loss, at ``imitation_lr``), then REINFORCE from the best of them (``uavgnn.training.schedule``) for the rest
    of ``train.steps``, its batches and rollouts counted from its own first step: the same run as
    ``algorithm=imitation train.steps=N`` followed by ``algorithm=reinforce algorithm.init_from=<its best.pt>``
    (with a curriculum, its stages go on through both phases).
    """

    name = "reinforce"
    learns_labels = False  # it learns from the reward (the labels only with algorithm.imitation_weight: without_labels)
    streams = {"rollouts": "REINFORCE's sampled assignments of a step"}
    config = ReinforceConfig

    def __init__(self, cfg: Any, device: torch.device) -> None:
        super().__init__(cfg, device)
        alg = cfg.algorithm  # read once here: an OmegaConf lookup inside a compiled step breaks its graph
        self.imitation_steps = int(alg.imitation_steps)
        self.loss_options = dict(
            samples=int(alg.samples),
            imitation_weight=float(alg.imitation_weight),
            baseline=str(alg.baseline),
            entropy_coef=float(alg.entropy_coef),
            temperature=float(alg.temperature),
            dense_max_nodes=self.dense_max_nodes,
            greedy_rounds=self.greedy_rounds,
        )

    @classmethod
    def without_labels(cls, cfg: Any) -> str | None:
        weight = cfg.algorithm.imitation_weight
        return (
            None
            if weight == 0
            else (
                f"data.source=generated with algorithm.imitation_weight={weight}: fresh "
                "scenes have no MILP labels; set algorithm.imitation_weight=0"
            )
        )

    @classmethod
    def check(cls, cfg: Any) -> None:
        super().check(cfg)
        alg = cfg.algorithm
        if alg.baseline not in ("greedy", "mean"):
            raise ConfigError(f"algorithm.baseline={alg.baseline!r} is not one of greedy, mean")
        least, why = (3, "two, each the other's baseline") if alg.baseline == "mean" else (2, "one at least")
        if alg.samples < least:
            raise ConfigError(
                f"algorithm.samples={alg.samples} must be >= {least} with algorithm.baseline="
                f"{alg.baseline} (samples - 1 rollouts are drawn: {why})"
            )
        if alg.imitation_steps:
            cls.check_imitation_phase(cfg)

    @staticmethod
    def check_imitation_phase(cfg: Any) -> None:
        steps, name = cfg.algorithm.imitation_steps, "algorithm.imitation_steps"
        if steps > cfg.train.steps:
            raise ConfigError(
                f"{name}={steps} must be at most train.steps={cfg.train.steps} (REINFORCE trains the steps after it)"
            )
        if cfg.algorithm.init_from:
            raise ConfigError(
                f"{name}={steps} with algorithm.init_from: the run trains its starting policy itself; "
                "set algorithm.imitation_steps=0 to start from the checkpoint"
            )

    def phases(self) -> list[Phase]:
        reinforce = super().phases()[0]
        if not self.imitation_steps:
            return [reinforce]
        alg, n = self.cfg.algorithm, self.imitation_steps
        return [
            Phase("imitation", 0, n, float(alg.imitation_lr), int(alg.imitation_warmup)),
            Phase("reinforce", n, reinforce.end, reinforce.lr, reinforce.warmup),
        ]

    def workload(self, model: nn.Module) -> SceneWorkload:
        return SceneWorkload(self.cfg, self.device, self.imitation_steps)

    def draws(self, batch: Batch, step: int) -> Noise | torch.Generator | None:
        """The rollouts' noise from the step's own stream (counted from REINFORCE's first step), drawn before the
        step when the batch knows on the host how many candidates its budget keeps (cached splits, padded fresh
        scenes: the step stays one graph); otherwise the step draws from the stream itself. None in the
        imitation phase, which draws nothing."""
        if step < self.imitation_steps:
            return None
        generator = stream(
            self.cfg.seed, "rollouts", step - self.imitation_steps, distributed.context().rank, self.device
        )
        n_cand = kept_size(batch, batch.k)
        if n_cand is None:
            return generator
        return rollout_noise(generator, self.cfg.algorithm.samples - 1, n_cand, batch.num_nodes, self.device)

    def training_step(self, model: nn.Module, batch: Batch, draws: Noise | torch.Generator | None) -> StepOutput:
        if draws is None:  # the imitation phase (see ``draws``)
            loss, acc, covered = batch_imitation_loss(model, batch, self.dense_max_nodes, self.greedy_rounds)
            return StepOutput(loss, {"acc": acc}, covered)
        loss, stats, n_uav = reinforce_loss(model, batch, draws=draws, **self.loss_options)
        return StepOutput(loss, stats, n_uav)
