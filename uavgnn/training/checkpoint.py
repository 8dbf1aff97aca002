"""Checkpoints that restore everything a run needs to continue exactly where it stopped."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from uavgnn.models import TransformerGNN, model_from_config

LAST = "last.pt"
BEST = "best.pt"


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Atomic: a crash mid-write leaves the previous checkpoint intact."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Our own checkpoints carry numpy/python RNG states, so this is a trusted full load;
    a missing file is named clearly."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"ckpt: no checkpoint at {path}")
    return torch.load(path, map_location=map_location, weights_only=False)


def load_model(path: str | Path, device: torch.device | str = "cpu") -> tuple[TransformerGNN, dict[str, Any]]:
    """The trained model of a checkpoint (architecture from its stored config) and that config."""
    ckpt = load_checkpoint(path, device)
    model = model_from_config(SimpleNamespace(**ckpt["config"]["model"])).to(device)
    model.load_state_dict(ckpt["policy"])
    return model.eval(), ckpt["config"]


def find_resume_checkpoint(out_dir: Path) -> Path | None:
    path = out_dir / LAST
    return path if path.is_file() else None
