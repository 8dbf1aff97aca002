"""N agents' networks of one architecture with their own weights, stored stacked and evaluated in one call.

``torch.func.stack_module_state`` stacks the agents' parameters along a new
leading dimension; ``functional_call`` + ``vmap`` run the architecture once
over all of them - one batched matmul per layer instead of N small ones
(reference/002's first bottleneck). ``module(i)`` gives agent i as an
ordinary ``nn.Module`` holding a copy of its weights (for tests and the
naive reference).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from uavgnn.models.transformer_gnn import mlp


@dataclass
class MLPConfig:
    """``model=mlp``: the MLP actors of the environment algorithms (per-agent weights, or one shared)."""

    name: str = "mlp"
    hidden: int = 128  # actor width
    layers: int = 2  # actor hidden layers


def mlp_net(inputs: int, hidden: int, layers: int, outputs: int) -> nn.Sequential:
    """``layers`` hidden layers of ``hidden`` units with ReLU (the usual SAC networks)."""
    return mlp([inputs] + [hidden] * layers + [outputs], nn.ReLU)


class AgentStack(nn.Module):
    """``n`` independently initialised copies of ``make()``, evaluated together with ``vmap``."""

    def __init__(self, make: Callable[[], nn.Module], n: int) -> None:
        super().__init__()
        modules = [make() for _ in range(n)]
        params, _ = stack_module_state(modules)
        self.names = list(params)
        self.weights = nn.ParameterList(nn.Parameter(params[name].detach().clone()) for name in self.names)
        self._skeleton = [copy.deepcopy(modules[0]).to("meta")]  # a list: not a submodule, holds no weights
        self.n = n

    def forward(self, x: torch.Tensor, weights: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
        """Every agent's output for its own input, x (n, ...); ``weights`` replaces the parameters (e.g. detached
        ones, or target copies)."""
        params = dict(zip(self.names, self.weights if weights is None else weights))

        def one(p: dict[str, torch.Tensor], xi: torch.Tensor) -> torch.Tensor:
            return functional_call(self._skeleton[0], p, (xi,))

        return vmap(one)(params, x)

    def module(self, i: int) -> nn.Module:
        """Agent i as a plain module with a copy of its weights."""
        m = copy.deepcopy(self._skeleton[0]).to_empty(device=self.weights[0].device).to(self.weights[0].dtype)
        with torch.no_grad():
            for name, w in zip(self.names, self.weights):
                m.get_parameter(name).copy_(w[i])
        return m
