"""What the on-policy algorithms share: each collection is one episode in each of ``hardware.batch_size x
minibatches`` environments, played by the current policy, then ``data_passes`` passes over it of ``minibatches``
updates each (``uavgnn.envs.on_policy.EpisodeWorkload``). A batch is a number of episodes, so
``hardware.batch_size=auto`` (which sizes a batch of graphs or samples to the memory) does not apply."""

from __future__ import annotations

from dataclasses import dataclass

from uavgnn.algorithms.base import AlgorithmConfig, Cadence, Capabilities
from uavgnn.algorithms.env_policy import EnvPolicy
from uavgnn.config.validation import AT_LEAST_1, ranged


@dataclass
class OnPolicyConfig(AlgorithmConfig):
    minibatches: int = ranged(4, AT_LEAST_1)  # minibatches of hardware.batch_size episodes per collection
    data_passes: int = ranged(5, AT_LEAST_1)  # passes over each collection (updates = minibatches x passes)


class OnPolicy(EnvPolicy):
    """The base of the on-policy algorithms (a subclass declares ``dataclasses.replace(OnPolicy.capabilities,
    ...)`` with its models and actions, and a config that extends ``OnPolicyConfig``)."""

    capabilities = Capabilities(on_policy=True, auto_batch_size=False)

    def cadence(self) -> Cadence:
        """Collect before the first update of every ``minibatches x data_passes``."""
        return Cadence(updates=self.cfg.algorithm.minibatches * self.cfg.algorithm.data_passes)
