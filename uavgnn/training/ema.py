"""The moving average of the weights (``train.ema_decay``): the policy that is evaluated and shipped.

Kept in torch's ``AveragedModel`` (its checkpoints stay what they were), but updated here: the same EMA as
``get_ema_multi_avg_fn`` (the first update copies the weights), with the copy-or-average choice and the
skip of an update that was not applied made on the device, where ``AveragedModel.update_parameters`` reads
its counter on the host twice a step.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel

from uavgnn.algorithms.rl_math import lerp_all_


@torch.no_grad()
def update_moving_average(ema: AveragedModel, model: nn.Module, decay: float, applied: torch.Tensor) -> None:
    """``ema <- ema + w (model - ema)`` with ``w`` = 1 at the first update, ``1 - decay`` after it, 0 when
    ``applied`` (a device bool: the step's update was applied) is false; buffers are copied."""
    first = ema.n_averaged == 0
    weight = torch.where(first, applied, (1.0 - decay) * applied)  # a float: 1 or 0 at the first update
    lerp_all_(list(ema.module.parameters()), list(model.parameters()), weight)  # no_grad: no detach (a view op each)
    buffers = list(ema.module.buffers())
    if buffers:
        torch._foreach_copy_(buffers, list(model.buffers()))
    ema.n_averaged.add_(applied)  # a bool adds as 0 or 1
