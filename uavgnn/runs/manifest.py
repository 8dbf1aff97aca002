"""The run manifest: what produced a run - code version, packages, hardware, command line - so that a figure can
be traced back to the code and machine that made it, whichever dashboard the run used.

Written to ``summary.json`` (``manifest``), the head of ``run.log``, the wandb config (``manifest``) and
TensorBoard's text tab (``run/manifest``).
"""

from __future__ import annotations

import functools
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

PACKAGES = ("uavgnn", "torch", "torch_geometric", "hydra-core", "omegaconf", "wandb", "numpy", "scipy", "ortools")
SOURCE = Path(__file__).resolve().parents[2]  # the checkout (or site-packages) uavgnn runs from


def git_state(directory: Path) -> dict[str, Any]:
    """``commit`` and ``dirty`` (uncommitted changes, untracked files included) of the git checkout whose top is
    ``directory``; both None when it is not one (an installed wheel, even inside another repository) or git is
    missing."""

    def git(*args: str) -> str | None:
        try:  # --no-optional-locks: never hold the index lock a user's own git command may want
            done = subprocess.run(
                ["git", "--no-optional-locks", "-C", str(directory), *args], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None or Path(top.strip()).resolve() != directory.resolve():  # e.g. site-packages inside some repo
        return {"commit": None, "dirty": None}
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain") if commit else None
    return {"commit": commit.strip() if commit else None, "dirty": bool(status.strip()) if status is not None else None}


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def package_versions() -> dict[str, str | None]:
    """The installed versions of the packages a run's results depend on (None: not installed)."""
    return {name: _version(name) for name in PACKAGES}


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; ``platform`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def _fixed() -> dict[str, Any]:
    """What does not change within a process (git is asked once)."""
    return {
        "git": git_state(SOURCE),
        "python": platform.python_version(),
        "packages": package_versions(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
    }


def run_manifest(device: torch.device | str) -> dict[str, Any]:
    """The manifest of a run on ``device``: command line, git commit and dirty flag, Python and package versions,
    platform, CPU model, GPU model (on CUDA) and torch's CPU threads."""
    device = torch.device(device)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        **_fixed(),
        "device": str(device),
        "gpu": gpu,
        "threads": torch.get_num_threads(),
    }


def manifest_lines(manifest: dict[str, Any]) -> list[str]:
    """The manifest as the lines that head ``run.log``."""
    git = manifest["git"]
    code = (
        f"git commit {git['commit']}{' (uncommitted changes)' if git['dirty'] else ''}"
        if git["commit"]
        else "not a git checkout"
    )
    packages = ", ".join(f"{name} {version}" for name, version in manifest["packages"].items() if version)
    threads = f"{manifest['threads']} torch thread{'s' if manifest['threads'] != 1 else ''}"
    hardware = f"{manifest['device']}, {manifest['gpu'] or manifest['cpu']}, {threads}"
    return [
        f"command: {manifest['command']}",
        f"code: {code}",
        f"python {manifest['python']}: {packages}",
        f"hardware: {hardware} ({manifest['platform']})",
    ]
