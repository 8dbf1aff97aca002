"""Temporal convolutional network (``model=tcn``, sizes from ``model.hidden``/``model.layers``) for
``algorithm=dynamics``: dilated causal 1-D convolutions in residual blocks, so the output at row t sees
rows <= t only (the receptive field doubles with each block)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

KERNEL = 3


@dataclass
class TCNConfig:
    """``model=tcn``: the dynamics model's size (a TransformerGNN size gives its hidden, layers and dropout too)."""

    name: str = "tcn"
    hidden: int = 64  # channels
    layers: int = 3  # residual blocks, dilation 1, 2, 4: receptive field 29 rows (algorithm.window 32)
    dropout: float = 0.0  # dropout after the first convolution of each block


@dataclass
class LearnedFilterConfig:
    """``model=learned_filter`` (``algorithm=dynamics``): the tuned extended Kalman filter's recursion with a TCN
    of this size correcting its estimate (``uavgnn.dynamics.learned_filter``)."""

    name: str = "learned_filter"
    hidden: int = 64  # the correcting TCN's channels
    layers: int = 3  # its residual blocks (dilation 1, 2, 4: 29 rows)
    dropout: float = 0.0  # dropout after the first convolution of each block


class CausalBlock(nn.Module):
    """Two dilated causal convolutions with a residual connection."""

    def __init__(self, channels: int, dilation: int, dropout: float) -> None:
        super().__init__()
        self.pad = (KERNEL - 1) * dilation
        self.conv1 = nn.Conv1d(channels, channels, KERNEL, dilation=dilation)
        self.conv2 = nn.Conv1d(channels, channels, KERNEL, dilation=dilation)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, L)
        h = self.dropout(F.gelu(self.conv1(F.pad(x, (self.pad, 0)))))
        return F.gelu(x + self.conv2(F.pad(h, (self.pad, 0))))


class TCN(nn.Module):
    """(B, L, in_features) -> (B, L, out_features), causal in L."""

    def __init__(self, in_features: int, out_features: int, hidden: int, layers: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.inp = nn.Conv1d(in_features, hidden, 1)
        self.blocks = nn.ModuleList(CausalBlock(hidden, 2**i, dropout) for i in range(layers))
        self.out = nn.Conv1d(hidden, out_features, 1)
        self.receptive_field = 1 + 2 * (KERNEL - 1) * (2**layers - 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x.transpose(1, 2))
        for block in self.blocks:
            h = block(h)
        return self.out(h).transpose(1, 2)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
