"""Checks of environment and replay state read back from a checkpoint: a damaged or foreign one is a one-line
error naming the part and the field, never a run that loads it and diverges later."""

from __future__ import annotations

import torch


def check_tensors(part: str, saved: dict[str, torch.Tensor], expected: dict[str, tuple[int, ...]]) -> None:
    """``saved`` holds exactly the fields of ``expected``, each of its shape and finite, else a ``ValueError``."""
    if set(saved) != set(expected):
        raise ValueError(f"{part}: fields {sorted(saved)}, expected {sorted(expected)}")
    for name, value in saved.items():
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(expected[name]):
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(f"{part}: {name} has shape {shape}, expected {tuple(expected[name])}")
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise ValueError(f"{part}: {name} holds non-finite values")
