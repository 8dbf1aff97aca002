"""Checkpoints that restore everything a run needs to continue exactly where it stopped.

Every checkpoint is read with ``torch.load(weights_only=True)``: a file holding
anything but tensors and plain containers (a pickle whose ``__reduce__`` would
run code) is refused before any of it executes. So everything is stored as
plain types: the numpy and Python RNG states as ints, the config as a YAML string.
"""

from __future__ import annotations

import logging
import math
import pickle
import random
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

from uavgnn.errors import CheckpointError, ConfigError
from uavgnn.models import TransformerGNN, model_from_config
from uavgnn.problem.graphs import FEATURE_SET, GraphSettings
from uavgnn.storage import save_torch

log = logging.getLogger(__name__)
LAST = "last.pt"
BEST = "best.pt"
REQUIRED = ("policy", "config")
EXPLODED = 1e3  # weight-norm growth between two checkpoints taken as a blow-up


def rng_state() -> dict[str, Any]:
    """All RNG states as tensors, ints and lists (what ``weights_only`` loading accepts)."""
    numpy_state = np.random.get_state(legacy=False)
    version, words, gauss = random.getstate()
    state = {"torch": torch.get_rng_state(),
             "numpy": {"key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
                       "pos": int(numpy_state["state"]["pos"]), "has_gauss": int(numpy_state["has_gauss"]),
                       "gauss": float(numpy_state["gauss"])},
             "python": [version, list(words), gauss]}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    saved = state["numpy"]
    np.random.set_state({"bit_generator": "MT19937", "has_gauss": saved["has_gauss"], "gauss": saved["gauss"],
                         "state": {"key": saved["key"].numpy().astype(np.uint32), "pos": saved["pos"]}})
    version, words, gauss = state["python"]
    random.setstate((version, tuple(words), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: Path, payload: dict[str, Any], cfg: Any) -> None:
    """Atomic (a crash mid-write leaves the previous checkpoint intact); ``cfg`` is stored as YAML."""
    save_torch(path, {**payload, "config": OmegaConf.to_yaml(cfg, resolve=True)})


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """A checkpoint's contents with ``config`` as a plain dict; anything else is a one-line ``CheckpointError``
    naming the file: missing, truncated, not a checkpoint, or carrying code that would run on load."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path}: no such file")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
        if found:
            raise CheckpointError(f"checkpoint {path}: refused: it holds Python objects ({found.group(1)}) that "
                                  "would run code when loaded; only tensors and plain values are accepted") from None
        raise CheckpointError(f"checkpoint {path}: unreadable, truncated or not a checkpoint "
                              f"(UnpicklingError: {_first_line(err)})") from None
    except Exception as err:  # noqa: BLE001 - truncated zip, text file, wrong device...: all one clear line
        raise CheckpointError(f"checkpoint {path}: unreadable, truncated or not a checkpoint "
                              f"({type(err).__name__}: {_first_line(err)})") from None
    if not isinstance(ckpt, dict) or any(key not in ckpt for key in REQUIRED) or not isinstance(ckpt["config"], str):
        raise CheckpointError(f"checkpoint {path}: not a uavgnn checkpoint of this version (expected the keys "
                              f"{', '.join(REQUIRED)} with the config as YAML)")
    try:
        ckpt["config"] = OmegaConf.to_container(OmegaConf.create(ckpt["config"]))
    except Exception as err:  # noqa: BLE001 - a damaged config string
        raise CheckpointError(f"checkpoint {path}: its stored config does not parse ({_first_line(err)})") from None
    return ckpt


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else type(err).__name__


def load_model(path: str | Path, device: torch.device | str = "cpu"
               ) -> tuple[TransformerGNN, GraphSettings, dict[str, Any]]:
    """The trained model of a checkpoint (architecture from its stored config), the graph settings it was
    trained with (use them to build its graphs) and its config."""
    ckpt = load_checkpoint(path, device)
    model = model_from_config(SimpleNamespace(**ckpt["config"]["model"])).to(device)
    load_weights(model, ckpt, path)
    try:
        graph = GraphSettings(**{"features": "rel-v2", **ckpt["graph"]})  # rel-v2: before the set was recorded
    except (KeyError, TypeError) as err:
        raise CheckpointError(f"checkpoint {path}: no valid graph settings ({_first_line(err)})") from None
    _check_features(path, graph.features)
    return model.eval(), graph, ckpt["config"]


def load_weights(model: torch.nn.Module, ckpt: dict[str, Any], path: str | Path) -> None:
    """The checkpoint's policy weights into ``model`` (built from its stored config), or a one-line error naming
    the first mismatch, e.g. weights saved before this version changed the networks' inputs."""
    try:
        model.load_state_dict(ckpt["policy"])
    except (RuntimeError, TypeError, AttributeError) as err:
        lines = [line.strip() for line in str(err).strip().splitlines()]
        detail = (lines[1] if len(lines) > 1 else lines[0] if lines else type(err).__name__)[:200]
        raise CheckpointError(f"checkpoint {path}: its weights do not fit the networks of its config in this "
                              f"version ({detail}); retrain it, or use the uavgnn version it was trained with"
                              ) from None


def _check_features(path: str | Path, features: str) -> None:
    if features != FEATURE_SET:
        raise CheckpointError(f"checkpoint {path}: trained on graph features {features!r}, but this version builds "
                              f"{FEATURE_SET!r}; its outputs would be meaningless: retrain it (or use the uavgnn "
                              "version it was trained with)")


def weights_norm(module: torch.nn.Module) -> float:
    """The global L2 norm of a module's parameters (inf/nan when any weight is non-finite)."""
    return float(torch.linalg.vector_norm(torch.stack([p.detach().float().norm() for p in module.parameters()])))


def weights_problem(norm: float, reference_norm: float) -> str | None:
    """Why weights of global norm ``norm`` must not be checkpointed, or None: non-finite, or more than
    ``EXPLODED`` times the norm of the last good checkpoint (a blown-up update whose loss is still finite)."""
    if not math.isfinite(norm):
        return "are non-finite"
    if norm > EXPLODED * max(reference_norm, 1.0):
        return f"exploded (norm {norm:.3g}, {reference_norm:.3g} at the last good checkpoint)"
    return None


def find_resume_checkpoint(out_dir: Path) -> Path | None:
    path = out_dir / LAST
    return path if path.is_file() else None


def load_initial_policy(model: TransformerGNN, path: str, model_cfg, device: torch.device) -> None:
    """Start from a checkpoint's policy (``algorithm.init_from``), e.g. imitation weights to fine-tune."""
    ckpt = load_checkpoint(Path(path), device)
    if "graph" in ckpt:
        _check_features(path, ckpt["graph"].get("features", "rel-v2"))
    stored = ckpt["config"]["model"]
    differ = [f"model.{key}={model_cfg[key]} (checkpoint: {stored[key]})"
              for key in ("hidden", "heads", "layers", "ffn_mult") if stored[key] != model_cfg[key]]
    if differ:
        raise ConfigError(f"algorithm.init_from={path} was trained with another architecture: {', '.join(differ)}; "
                          f"use model={stored['name']}")
    model.load_state_dict(ckpt["policy"])
    log.info("algorithm.init_from: starting from the policy of %s", path)
