"""Checkpoint files: everything a run needs to continue exactly where it stopped, read back safely.

Every checkpoint is read with ``torch.load(weights_only=True)``: a file holding
anything but tensors and plain containers (a pickle whose ``__reduce__`` would
run code) is refused before any of it executes. So everything is stored as
plain types: the numpy and Python RNG states as ints, the config as a YAML string.

Each part (weights, optimiser, replay buffer, environment state, ...) carries a
SHA-256 of its contents, checked on every load: a byte flipped on the disk is a
one-line error naming the part, never a silently different run. Every weight
and optimiser load goes through ``load_weights``, whose one-line error names the
checkpoint's kind (algorithm, model) and what takes such a checkpoint (the
algorithm registry says that: ``uavgnn.algorithms.registry.describe``).
"""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

from uavgnn.infrastructure.errors import CheckpointError
from uavgnn.infrastructure.storage import replacing, save_torch
from uavgnn.runs.layout import LAST

REQUIRED = ("policy", "config")
EXPLODED = 1e3  # weight-norm growth between two checkpoints taken as a blow-up
CHECKSUMS = "checksums"
PRETRAINED = "pretrained"  # ckpt=pretrained, algorithm.init_from=pretrained: the policy shipped in the package
PRETRAINED_FILE = Path(__file__).parents[1] / "pretrained" / "policy16.pt"
DEPLOYED = ("policy", "config", "graph")  # the parts that run a policy: what export_policy keeps

# what each checksummed part is called in an error ("data.<key>": a part of the workload's state)
PART_NAMES = {
    "model": "weights",
    "policy": "policy weights",
    "ema": "moving-average weights",
    "optimizer": "optimiser state",
    "scaler": "gradient-scaler state",
    "algorithm": "algorithm state",
    "state": "training counters",
    "rng": "random-number states",
    "config": "config",
    "data.env": "environment state",
    "data.buffer": "replay buffer",
    "data.episodes": "episodes",
    "data.obs": "current observations",
    "data.state": "current environment state",
    "data.window": "log window",
    "window": "log window",
    "history_rows": "history length",
}


def rng_state() -> dict[str, Any]:
    """All RNG states as tensors, ints and lists (what ``weights_only`` loading accepts)."""
    numpy_state = np.random.get_state(legacy=False)
    version, words, gauss = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
            "pos": int(numpy_state["state"]["pos"]),
            "has_gauss": int(numpy_state["has_gauss"]),
            "gauss": float(numpy_state["gauss"]),
        },
        "python": [version, list(words), gauss],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """The generators as saved; the states are host tensors whatever device the checkpoint was loaded onto, and
    the CUDA ones go to as many GPUs as this machine has."""
    torch.set_rng_state(state["torch"].cpu())
    saved = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": "MT19937",
            "has_gauss": saved["has_gauss"],
            "gauss": saved["gauss"],
            "state": {"key": saved["key"].cpu().numpy().astype(np.uint32), "pos": saved["pos"]},
        }
    )
    version, words, gauss = state["python"]
    random.setstate((version, tuple(words), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([cuda.cpu() for cuda in state["cuda"][: torch.cuda.device_count()]])


def save_checkpoint(path: Path, payload: dict[str, Any], cfg: Any) -> None:
    """Atomic (a crash mid-write leaves the previous checkpoint intact); ``cfg`` is stored as YAML; every part
    with its checksum."""
    payload = {**payload, "config": OmegaConf.to_yaml(cfg, resolve=True)}
    save_torch(path, {**payload, CHECKSUMS: part_checksums(payload)})


def _parts(payload: dict[str, Any]) -> dict[str, Any]:
    """The checksummed parts: each top-level entry, the workload's state (``data``) entry by entry."""
    parts = {key: value for key, value in payload.items() if key not in (CHECKSUMS, "data")}
    data = payload.get("data")
    if isinstance(data, dict):
        parts.update({f"data.{key}": value for key, value in data.items()})
    elif "data" in payload:
        parts["data"] = data
    return parts


def part_checksums(payload: dict[str, Any]) -> dict[str, str]:
    """SHA-256 of each part's contents (tensors by dtype, shape and bytes; containers in key order)."""
    checksums = {}
    for name, value in _parts(payload).items():
        digest = hashlib.sha256()
        _digest(value, digest)
        checksums[name] = digest.hexdigest()
    return checksums


def _digest(value: Any, digest: Any) -> None:
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        digest.update(f"T{tensor.dtype}{tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    elif isinstance(value, dict):
        digest.update(b"{")
        for key in sorted(value, key=str):
            digest.update(repr(key).encode())
            _digest(value[key], digest)
        digest.update(b"}")
    elif isinstance(value, (list, tuple)):
        digest.update(b"[")
        for item in value:
            _digest(item, digest)
        digest.update(b"]")
    else:
        digest.update(repr(value).encode())


def _verify_parts(path: Path, ckpt: dict[str, Any], config: dict[str, Any]) -> None:
    """Each part's contents against the checksum saved with it (checkpoints written before checksums pass)."""
    saved = ckpt.get(CHECKSUMS)
    if saved is None:
        return
    if not isinstance(saved, dict):
        raise CheckpointError(f"checkpoint {path}: its checksums are damaged (the file is corrupt)")
    now = part_checksums(ckpt)
    for name in sorted(set(saved) | set(now)):
        if saved.get(name) != now.get(name):
            problem = (
                "is missing"
                if name not in now
                else "was not there when it was written"
                if name not in saved
                else "fails its checksum"
            )
            raise CheckpointError(
                f"checkpoint {path} ({kind(config)}): part '{name}' ({PART_NAMES.get(name, name)}) "
                f"{problem}: the file was damaged after it was written; restore it from a copy"
            )


def rank_data_path(path: Path, rank: int) -> Path:
    """Where rank ``rank`` > 0 keeps its workload state beside ``last.pt`` (rank 0's is inside it)."""
    return path.with_name(f"{path.stem}.rank{rank}.data.pt")


def save_part(path: Path, value: Any) -> None:
    """A part of a checkpoint in a file of its own (a data-parallel rank's environments), with its checksum."""
    save_torch(path, {"part": value, CHECKSUMS: part_checksums({"part": value})})


def load_part(path: Path, map_location: str | torch.device = "cpu") -> Any:
    """What ``save_part`` wrote, verified; anything else is a one-line ``CheckpointError`` naming the file."""
    try:
        saved = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # noqa: BLE001 - truncated, text, hostile: all one clear line
        raise CheckpointError(
            f"checkpoint part {path}: unreadable, truncated or not ours ({type(err).__name__}: {_first_line(err)})"
        ) from None
    if not (
        isinstance(saved, dict) and "part" in saved and saved.get(CHECKSUMS) == part_checksums({"part": saved["part"]})
    ):
        raise CheckpointError(
            f"checkpoint part {path}: fails its checksum or is not ours: the file was damaged "
            "after it was written; restore it from a copy"
        )
    return saved["part"]


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """A checkpoint's contents with ``config`` as a plain dict; anything else is a one-line ``CheckpointError``
    naming the file: missing, truncated, not a checkpoint, or carrying code that would run on load."""
    path = checkpoint_path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path}: no such file")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
        if found:
            raise CheckpointError(
                f"checkpoint {path}: refused: it holds Python objects ({found.group(1)}) that "
                "would run code when loaded; only tensors and plain values are accepted"
            ) from None
        raise CheckpointError(
            f"checkpoint {path}: unreadable, truncated or not a checkpoint (UnpicklingError: {_first_line(err)})"
        ) from None
    except Exception as err:  # noqa: BLE001 - truncated zip, text file, wrong device...: all one clear line
        raise CheckpointError(
            f"checkpoint {path}: unreadable, truncated or not a checkpoint ({type(err).__name__}: {_first_line(err)})"
        ) from None
    if not isinstance(ckpt, dict) or any(key not in ckpt for key in REQUIRED) or not isinstance(ckpt["config"], str):
        raise CheckpointError(
            f"checkpoint {path}: not a uavgnn checkpoint of this version (expected the keys "
            f"{', '.join(REQUIRED)} with the config as YAML)"
        )
    try:
        config = OmegaConf.to_container(OmegaConf.create(ckpt["config"]))
    except Exception as err:  # noqa: BLE001 - a damaged config string
        raise CheckpointError(f"checkpoint {path}: its stored config does not parse ({_first_line(err)})") from None
    _verify_parts(path, ckpt, config)
    ckpt["config"] = config
    return ckpt


def checkpoint_path(value: str | Path) -> Path:
    """``pretrained`` is the 16-UAV assignment policy shipped in the package (docs/pretrained.md);
    anything else is a path."""
    return PRETRAINED_FILE if str(value) == PRETRAINED else Path(value)


def export_policy(source: str | Path, destination: str | Path) -> int:
    """A checkpoint's policy weights, config and graph settings (what deploys it; no optimiser, counters or
    random states) in a new file of their own, checksummed like any checkpoint: how a policy is shared.
    Never replaces anything at ``destination``, a dangling symlink included: the file appears whole, and only if
    nothing is there when it does (of two exports racing to one path, one succeeds and the other is refused).
    Returns the bytes written."""
    destination = Path(destination)
    refused = CheckpointError(f"export_policy: {destination} exists; not replacing it (remove it first)")
    if os.path.lexists(destination):
        raise refused
    ckpt = load_checkpoint(source)
    missing = [part for part in DEPLOYED if part not in ckpt]
    if missing:
        raise CheckpointError(
            f"checkpoint {source} ({kind(ckpt['config'])}): has no {', '.join(missing)}: "
            "not an assignment policy to export"
        )
    payload = {part: ckpt[part] for part in DEPLOYED if part != "config"}
    try:
        with replacing(destination, new=True) as tmp:
            save_checkpoint(tmp, payload, OmegaConf.create(ckpt["config"]))
    except FileExistsError:
        raise refused from None
    return destination.stat().st_size


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else type(err).__name__


def _named(config: dict[str, Any] | None, group: str, default: str) -> str:
    """``config[group].name`` of a stored config (``default`` where it is missing: saved before the group)."""
    node = config.get(group) if isinstance(config, dict) else None
    return str(node.get("name", default)) if isinstance(node, dict) else default


def kind(config: dict[str, Any] | None) -> str:
    """What a checkpoint holds, from its stored config: ``algorithm=masac, model=mlp``."""
    return f"algorithm={_named(config, 'algorithm', 'imitation')}, model={_named(config, 'model', '?')}"


def load_weights(
    module: torch.nn.Module | Any, state: Any, path: str | Path, description: str, part: str = "weights"
) -> None:
    """The one way weights (or an optimiser's state: anything with ``load_state_dict``) get loaded: ``state``
    into ``module``, or a one-line ``CheckpointError`` naming the first mismatch and, through ``description``
    (``uavgnn.algorithms.registry.describe``), the checkpoint's kind and what takes it (e.g. weights saved before this
    version changed the networks' inputs)."""
    try:
        module.load_state_dict(state)
    except CheckpointError as err:  # what the part itself found, with its own advice
        raise CheckpointError(f"checkpoint {path} ({description}): {err}") from None
    except (RuntimeError, TypeError, AttributeError, KeyError, ValueError, IndexError) as err:
        lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
        detail = (lines[1] if len(lines) > 1 else lines[0] if lines else type(err).__name__)[:200]
        raise CheckpointError(
            f"checkpoint {path} ({description}): its {part} do not fit what this run builds "
            f"({detail}); use it with the uavgnn version it was trained with"
        ) from None


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
