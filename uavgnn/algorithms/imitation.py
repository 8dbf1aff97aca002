"""Imitation of the exact solver: the NLL of the MILP's choice of every UAV (idle or one candidate).

One forward pass scores every UAV's candidates in the batch; the loss is the
mean over UAVs of ``-log pi_i(a_i*)`` with ``a*`` the MILP's assignment (a
UAV whose labelled target was cut by the jittered ``k`` is left out), and the
accuracy of the per-UAV argmax is logged as ``train/acc``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.data import Batch

from uavgnn.algorithms.base import Algorithm, StepOutput
from uavgnn.models.choices import imitation_loss
from uavgnn.models.policy import policy_log_probs


def batch_imitation_loss(model: nn.Module, batch: Batch, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(NLL of the MILP's choices, accuracy, covered UAVs) of a labelled batch at candidate budget ``k``."""
    cand_logp, idle_logp, keep = policy_log_probs(model, batch, k)
    return imitation_loss(cand_logp, idle_logp, batch.cand_index[0, keep], batch.cand_label[keep], batch.busy,
                          batch.node_type == 0)


class Imitation(Algorithm):
    def training_step(self, model: nn.Module, batch: Batch, k: int, step: int) -> StepOutput:
        loss, acc, covered = batch_imitation_loss(model, batch, k)
        return StepOutput(loss, {"acc": acc}, covered)
