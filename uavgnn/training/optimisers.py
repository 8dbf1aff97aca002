"""One AdamW per network an algorithm names (MASAC's critics, actors and temperatures; COMA's critic and actor;
the whole model otherwise), each at its own LR multiple and gradient clip: what the loop and ``mode=profile``
step. A critic's large gradients no longer shrink the actor's step through one shared clip.

Each AdamW is fused (one kernel for all its parameters, not ~10 ops per parameter) and the clips are foreach;
a step whose loss or gradients are not finite is skipped on the device (the fused kernel's ``found_inf``), so
the host never waits for the verdict: the loop reads it with the step's statistics at its next log point."""

from __future__ import annotations

import math
from typing import Any

import torch

from uavgnn.algorithms.base import Network


class Optimisers:
    """The optimisers of ``networks``: LR ``lr`` x each network's ``lr_scale``, clip its ``grad_clip`` (or
    ``grad_clip``); stepped together under one gradient scaler."""

    def __init__(
        self, networks: list[Network], lr: float, weight_decay: float, grad_clip: float, capturable: bool = False
    ) -> None:
        self.networks, self.capturable = networks, capturable
        self.clips = [grad_clip if net.grad_clip is None else net.grad_clip for net in networks]
        self.clip_tensor: torch.Tensor | None = None  # the clips on the gradients' device (several networks)
        self.adamw = [
            torch.optim.AdamW(
                net.params, lr=lr * net.lr_scale, weight_decay=weight_decay, fused=True, capturable=capturable
            )
            for net in networks
        ]
        self.loads = 0  # state loads so far: a CUDA graph captured before one points at replaced tensors
        self._device_lrs()

    def _device_lrs(self) -> None:
        """Capturable: each learning rate a device tensor, set in place (a CUDA graph reads it at replay;
        a float would be baked into the captured kernels)."""
        if self.capturable:
            for net, adamw in zip(self.networks, self.adamw):
                for group in adamw.param_groups:
                    group["lr"] = torch.tensor(float(group["lr"]), device=net.params[0].device)

    def set_lr(self, lr: float, factor: float) -> None:
        """Every network at ``lr`` (the phase's peak LR) x its own scale x ``factor`` (schedule, curriculum,
        rollbacks)."""
        for net, adamw in zip(self.networks, self.adamw):
            for group in adamw.param_groups:
                if self.capturable:
                    group["lr"].fill_(lr * net.lr_scale * factor)
                else:
                    group["lr"] = lr * net.lr_scale * factor

    def zero_grad(self) -> None:
        """Every gradient to None (what ``AdamW.zero_grad`` does, without its profiler record: no op a step)."""
        for net in self.networks:
            for param in net.params:
                param.grad = None

    def backward(self, loss: torch.Tensor) -> None:
        """Every network's gradients of ``loss`` set as their ``.grad`` by ``torch.autograd.grad``: what
        ``loss.backward()`` leaves after ``zero_grad``, without its AccumulateGrad nodes' detach, one op per
        parameter. A gradient not in its parameter's layout is copied into it, as AccumulateGrad does. Not under
        DDP, whose gradient buckets are reduced by AccumulateGrad's hooks."""
        params = [param for net in self.networks for param in net.params if param.requires_grad]
        for param, grad in zip(params, torch.autograd.grad(loss, params, allow_unused=True)):
            if grad is not None and grad.stride() != param.stride():
                grad = torch.empty_like(param).copy_(grad)
            param.grad = grad

    def clip(self) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_`` of each network's gradients to its own clip (in place, the same
        numbers), the norms of all networks' tensors from one foreach kernel: 14 ops for two networks and 16 for
        three, their sum included, instead of 18 and 26. Returns the sum of the networks' norms."""
        grads = [[p.grad for p in net.params if p.grad is not None] for net in self.networks]
        flat = [g for group in grads for g in group]
        if not flat:  # no gradient anywhere (clip_grad_norm_'s norm is then 0 too)
            return torch.zeros((), device=self.networks[0].params[0].device)
        norms = torch._foreach_norm(flat)  # as clip_grad_norm_ starts
        if len(grads) == 1:
            total = torch.linalg.vector_norm(torch.stack(norms))
            torch._foreach_mul_(grads[0], torch.clamp(self.clips[0] / (total + 1e-6), max=1.0))
            return total
        totals = torch.stack(
            [torch.linalg.vector_norm(part) for part in torch.stack(norms).split([len(group) for group in grads])]
        )
        if self.clip_tensor is None or self.clip_tensor.device != totals.device:
            self.clip_tensor = torch.tensor(self.clips, dtype=totals.dtype, device=totals.device)
        scales = torch.clamp((totals + 1e-6).reciprocal() * self.clip_tensor, max=1.0)  # clip_grad_norm_'s order
        for group, scale in zip(grads, scales.unbind()):
            if group:  # a network without gradients this step has nothing to scale
                torch._foreach_mul_(group, scale)
        return totals.sum()

    def step(self, scaler: torch.amp.GradScaler, healthy: torch.Tensor | None = None) -> torch.Tensor:
        """Unscale, clip each network's gradients to its own norm, step each, then update the scale once; no
        weight moves when ``healthy`` (a device bool: the loss was finite) is false or a gradient norm is not
        finite. Returns whether the update was applied, as a device bool (no host read)."""
        for adamw in self.adamw:
            scaler.unscale_(adamw)
        applied = self.clip() < math.inf  # norms are >= 0: false on an inf or NaN anywhere (not isfinite's four ops)
        if healthy is not None:
            applied = applied & healthy
        skipped = (~applied).float()
        for adamw in self.adamw:
            if scaler.is_enabled():  # fp16: the scaler skips on its own inf/NaN check (and lowers the scale)
                scaler.step(adamw)
                continue
            adamw.found_inf = skipped
            adamw.step()
            del adamw.found_inf
        scaler.update()
        return applied

    def state_dict(self) -> dict[str, Any]:
        """Each network's AdamW state, learning rates as floats (a checkpoint loads with or without
        CUDA graphs)."""
        states = {net.name: adamw.state_dict() for net, adamw in zip(self.networks, self.adamw)}
        return {
            name: {**state, "param_groups": [{**group, "lr": float(group["lr"])} for group in state["param_groups"]]}
            for name, state in states.items()
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Each network's state by name; a checkpoint written before per-network optimisers (one AdamW, one
        parameter group per network, in the same order) is split by group."""
        if "param_groups" in state:
            state = dict(zip([net.name for net in self.networks], split_by_group(state, len(self.networks))))
        names = [net.name for net in self.networks]
        if sorted(state) != sorted(names):
            raise ValueError(f"optimisers of the networks {', '.join(sorted(state))}, expected {', '.join(names)}")
        for net, adamw in zip(self.networks, self.adamw):
            saved = state[net.name]  # fused here whatever it was saved as (its step counters then live on the device)
            adamw.load_state_dict(
                {
                    **saved,
                    "param_groups": [
                        {**group, "fused": True, "foreach": None, "capturable": self.capturable}
                        for group in saved["param_groups"]
                    ],
                }
            )
        self.loads += 1
        self._device_lrs()


def split_by_group(state: dict[str, Any], networks: int) -> list[dict[str, Any]]:
    """One optimiser's state (a parameter group per network) as one state per group, parameters renumbered."""
    groups = state["param_groups"]
    if len(groups) != networks:
        raise ValueError(f"one optimiser of {len(groups)} parameter groups, expected one per network ({networks})")
    split = []
    for group in groups:
        kept = {key: value for key, value in group.items() if key not in ("params", "lr_scale")}
        split.append(
            {
                "state": {new: state["state"][old] for new, old in enumerate(group["params"]) if old in state["state"]},
                "param_groups": [{**kept, "params": list(range(len(group["params"])))}],
            }
        )
    return split
