"""Named random streams: every draw a run makes comes from a generator seeded by (seed, purpose, step, rank).

The four are hashed together (BLAKE2b), so two purposes never share a stream:
MASAC's update noise and its replay sampling were both seeded ``seed * 1_000_003
+ step``, their draws identical in distribution and order. A stream is a pure
function of its four names, so a resumed run (or a DDP rank, by ``rank``)
draws exactly what the uninterrupted run drew, with nothing to save.

``STREAMS`` are the shared ones (the data, the environments, the loop); an algorithm declares its own in its
class (``Algorithm.streams``), which registers them here when the class is defined: a plug-in that draws noise
edits only its own file.
"""

from __future__ import annotations

import hashlib
import random

import numpy as np
import torch

from uavgnn.infrastructure.errors import CheckpointError

STREAMS = {
    "environment": "the training environments' scenes and resets (per rank; step: a further swarm size's)",
    "swarm_size": "the swarm size of an on-policy collection (env.train_sizes)",
    "exploration": "actions sampled while collecting experience (per rank)",
    "replay": "which stored transitions a step's batch holds",
    "minibatch_order": "the order of an on-policy collection's episodes, per pass over it",
    "scene_order": "the training split's shuffle, per epoch",
    "curriculum": "a step's scenes of the current and earlier curriculum stages",
    "fresh_scenes": "a step's generated scenes (data.source=generated)",
    "fresh_size": "the size of a step's fresh scenes (data.fresh_sizes; the same on every rank)",
    "candidate_budget": "a step's jittered candidate budget k",
    "windows": "a step's trajectory windows",
    "filter_tuning": "a step's trajectory windows when a filter's settings are fitted",
    "observation_noise": "the noise on the recorded positions and velocities of a rollout split",
}


_declared: dict[str, tuple[str, str]] = {}  # a plug-in's stream -> (its owner, what it draws)


def declare(owner: str, streams: dict[str, str]) -> None:
    """``owner``'s own streams ({purpose: what it draws}); a purpose is one owner's, never a shared one's (two
    owners of one name would draw the same numbers)."""
    for purpose, why in streams.items():
        taken = "uavgnn" if purpose in STREAMS else _declared.get(purpose, (owner,))[0]
        if taken != owner:
            raise ValueError(f"random stream {purpose!r} of {owner} is already {taken}'s: name it after {owner}")
        _declared[purpose] = (owner, why)


def stream_seed(seed: int, purpose: str, step: int = 0, rank: int = 0) -> int:
    """The 63-bit seed of stream ``purpose`` (one of ``STREAMS`` or a declared one) at ``step`` on ``rank``."""
    if purpose not in STREAMS and purpose not in _declared:
        raise ValueError(
            f"unknown random stream {purpose!r} (expected one of {', '.join([*STREAMS, *_declared])}; "
            "an algorithm declares its own in its class's streams)"
        )
    digest = hashlib.blake2b(f"{seed}/{purpose}/{step}/{rank}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def stream(
    seed: int, purpose: str, step: int = 0, rank: int = 0, device: torch.device | str = "cpu"
) -> torch.Generator:
    """A generator on ``device`` for stream ``purpose`` at ``step`` on ``rank`` (see ``stream_seed``)."""
    return torch.Generator(device=device).manual_seed(stream_seed(seed, purpose, step, rank))


def restore_stream(generator: torch.Generator, state: torch.Tensor, what: str) -> None:
    """``generator.set_state(state)``, or one line when the state is another kind of device's: a CPU's stream
    and a CUDA one have different states, so a run resumes on the kind of device it ran on."""
    state = state.cpu()
    if state.numel() != generator.get_state().numel():
        raise CheckpointError(
            f"{what}'s random stream was saved on another kind of device than this run's "
            f"{generator.device.type}: resume it on the kind of device it ran on"
        )
    generator.set_state(state)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
