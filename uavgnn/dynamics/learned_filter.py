"""The learned filter (``model=learned_filter``): the extended Kalman filter's recursion with a learned part.

The EKF tuned on the TCN's loss (``uavgnn.dynamics.tuning``) filters every window as it does on its own; a causal
network - a TCN of ``model.hidden`` x ``model.layers``, built by the algorithm and handed in - reads the window's
features beside that filter's estimate and the EKF's with the data-estimated settings (each: position, positions
ahead, velocity, disturbance, the standard deviations of position and velocity), and corrects the positions ahead
and the disturbance. Its last layer starts at zero, so training starts from the tuned filter and the loss (the
TCN's: data + physics) moves it only where the data say so: the network takes what the filter's model lacks (the
unknown future commands, the rows where that model breaks) and, in the training disturbances, the precision of the
estimated settings, while the tuned filter's larger process noise keeps it from diverging beyond them. Its position
and velocity are the tuned filter's, with their covariance (so its NEES is that filter's).

Both filters are fixed while the network trains (their settings are in its checkpoint); the algorithm sets them
from the training split (``Dynamics.workload``).
"""

from __future__ import annotations

import torch
from torch import nn

from uavgnn.dynamics.filters import KinematicFilter
from uavgnn.dynamics.kinematics import Estimate, WindowModel
from uavgnn.dynamics.windows import N_FEATURES, WindowBatch


def corrected_outputs(predict_steps: int) -> int:
    """The network's output channels: a correction of each position ahead and of the disturbance."""
    return 2 * predict_steps + 2


def filter_features(predict_steps: int) -> int:
    """What the network reads of the filter at each row: position, positions ahead, velocity, disturbance
    (2 each) and the standard deviations of position and velocity (4)."""
    return 2 * (predict_steps + 1) + 8


def network_inputs(predict_steps: int) -> int:
    """The network's input channels: the window's features and both filters'."""
    return N_FEATURES + 2 * filter_features(predict_steps)


def seen(est: Estimate) -> torch.Tensor:
    """(B, W, ``filter_features``) what the network reads of a filter's estimate."""
    spread = est.covariance.diagonal(dim1=-2, dim2=-1).clamp(min=0).sqrt()
    return torch.cat([est.now, est.ahead.flatten(2), est.velocity, est.disturbance, spread.to(est.now.dtype)], -1)


class LearnedFilter(WindowModel):
    """``filter`` corrected by ``network``, (B, L, ``network_inputs``) -> (B, L, ``corrected_outputs``), causal in
    L, whose last layer is zeroed here; ``reference`` is read only. No gradient reaches either filter."""

    def __init__(self, flt: KinematicFilter, reference: KinematicFilter, network: nn.Module, last: nn.Module) -> None:
        """``last``: the network's output layer (zeroed, so the learned filter starts as ``flt``)."""
        super().__init__()
        self.filter, self.reference = flt.requires_grad_(False), reference.requires_grad_(False)
        self.network = network
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)

    def forward(self, batch: WindowBatch) -> Estimate:
        with torch.no_grad():
            base, other = self.filter(batch), self.reference(batch)
        x = batch.x[:, : self.filter.window]
        read = torch.cat([x, seen(base).to(x.dtype), seen(other).to(x.dtype)], -1)
        ahead, disturbance = self.network(read).split([2 * self.filter.predict_steps, 2], -1)
        return Estimate(
            base.now,
            base.ahead + ahead.unflatten(-1, base.ahead.shape[-2:]),
            base.velocity,
            base.disturbance + disturbance,
            base.covariance,
        )

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.network.parameters())
