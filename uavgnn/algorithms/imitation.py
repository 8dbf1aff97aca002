"""``algorithm=imitation`` (the default): the NLL of the exact solver's choice of every UAV (idle or one candidate).

One forward pass scores every UAV's candidates in the batch; the loss is the
mean over UAVs of ``-log pi_i(a_i*)`` with ``a*`` the MILP's assignment (a
UAV whose labelled target was cut by the batch's jittered budget ``k`` is left
out), and the accuracy of the per-UAV argmax is logged as ``train/acc``. The
data, validation and test phase are those of every assignment policy
(``scene_policy.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn
from torch_geometric.data import Batch

from uavgnn.algorithms.base import StepOutput
from uavgnn.algorithms.scene_policy import ScenePolicy, ScenePolicyConfig, batch_imitation_loss


@dataclass
class ImitationConfig(ScenePolicyConfig):
    name: str = "imitation"


class Imitation(ScenePolicy):
    name = "imitation"
    config = ImitationConfig

    def training_step(self, model: nn.Module, batch: Batch, draws: None) -> StepOutput:
        loss, acc, covered = batch_imitation_loss(model, batch, self.dense_max_nodes, self.greedy_rounds)
        return StepOutput(loss, {"acc": acc}, covered)
