"""N agents' networks of one architecture with their own weights, stored stacked and evaluated in one call.

``torch.func.stack_module_state`` stacks the agents' parameters along a new
leading dimension; the forward runs the architecture's layers in order, each
``nn.Linear`` as one batched ``bmm`` over all agents (reference/002's
first bottleneck: one matmul per layer instead of N small ones) and each
parameter-free layer (an elementwise activation) as it is. The activations are
kept feature-major, (n, features, rows), so that each layer is ``W h + b`` on
the weights as stored: ``h W^T`` transposed every weight in each forward,
and its gradient back in the backward, which then had to be copied into the
weight's layout (MASAC: 21 ops a step). ``vmap(functional_call)``
computed the same with about 3x the ops per layer (its batching rules
unsqueeze, expand and view around every matmul): each op is a kernel launch
on a GPU. ``module(i)`` gives agent i as an ordinary ``nn.Module`` holding a
copy of its weights (for tests and the naive reference).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import stack_module_state

from uavgnn.models.transformer_gnn import MLP, mlp


@dataclass
class MLPConfig:
    """``model=mlp``: the MLP actors of the environment algorithms (per-agent weights, or one shared)."""

    name: str = "mlp"
    hidden: int = 128  # actor width
    layers: int = 2  # actor hidden layers


def mlp_net(inputs: int, hidden: int, layers: int, outputs: int) -> MLP:
    """``layers`` hidden layers of ``hidden`` units with ReLU (the usual SAC networks)."""
    return mlp([inputs] + [hidden] * layers + [outputs], nn.ReLU)


class AgentStack(nn.Module):
    """``n`` independently initialised copies of ``make()`` (an ``nn.Sequential`` of ``nn.Linear`` and
    elementwise parameter-free layers), evaluated together."""

    def __init__(self, make: Callable[[], nn.Sequential], n: int) -> None:
        super().__init__()
        modules = [make() for _ in range(n)]
        odd = [type(m).__name__ for m in modules[0] if not isinstance(m, nn.Linear) and any(m.parameters())]
        if odd:
            raise TypeError(f"AgentStack stacks Linear layers and parameter-free ones, not {', '.join(odd)}")
        params, _ = stack_module_state(modules)
        self.names = list(params)
        self.weights = nn.ParameterList(nn.Parameter(params[name].detach().clone()) for name in self.names)
        self._skeleton = [copy.deepcopy(modules[0]).to("meta")]  # a list: not a submodule, holds no weights
        self.n = n

    def forward(self, x: torch.Tensor, weights: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
        """Every agent's output for its own input, x (n, ...); ``weights`` replaces the parameters (e.g. detached
        ones, or target copies)."""
        params = dict(zip(self.names, self.weights if weights is None else weights))
        shape = x.shape[1:-1]
        h = x.reshape(self.n, -1, x.shape[-1]).transpose(1, 2)  # (n, features, rows): feature-major
        for name, layer in self._skeleton[0].named_children():
            if isinstance(layer, nn.Linear):  # (n, out, in) weights: W h + b, all agents in one matmul
                # (the bias added apart, as nn.Linear under vmap did: under autocast the sum stays float32)
                h = torch.bmm(params[f"{name}.weight"], h) + params[f"{name}.bias"].unsqueeze(-1)
            else:
                h = layer(h)
        return h.transpose(1, 2).reshape(self.n, *shape, h.shape[1])

    def module(self, i: int) -> nn.Module:
        """Agent i as a plain module with a copy of its weights."""
        m = copy.deepcopy(self._skeleton[0]).to_empty(device=self.weights[0].device).to(self.weights[0].dtype)
        with torch.no_grad():
            for name, w in zip(self.names, self.weights):
                m.get_parameter(name).copy_(w[i])
        return m
