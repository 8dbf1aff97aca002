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

import torch
from torch import nn
from torch_geometric.data import Batch

from uavgnn.algorithms.base import StepOutput
from uavgnn.algorithms.scene_policy import ScenePolicy, ScenePolicyConfig
from uavgnn.models.choices import imitation_loss
from uavgnn.models.policy import policy_log_probs


@dataclass
class ImitationConfig(ScenePolicyConfig):
    name: str = "imitation"


def batch_imitation_loss(model: nn.Module, batch: Batch, dense_max_nodes: int = 0
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(NLL of the MILP's choices, accuracy, covered UAVs) of a labelled batch at its candidate budget
    (``dense_max_nodes``: see ``policy_log_probs``)."""
    cand_logp, idle_logp, keep = policy_log_probs(model, batch, batch.k, dense_max_nodes=dense_max_nodes)
    return imitation_loss(cand_logp, idle_logp, batch.cand_index[0, keep], batch.cand_label[keep], batch.busy,
                          batch.node_type == 0)


class Imitation(ScenePolicy):
    name = "imitation"
    config = ImitationConfig

    def training_step(self, model: nn.Module, batch: Batch, draws: None) -> StepOutput:
        loss, acc, covered = batch_imitation_loss(model, batch, self.dense_max_nodes)
        return StepOutput(loss, {"acc": acc}, covered)
