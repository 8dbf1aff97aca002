"""The one list of the keys that do not define a run: they change where a run is, how it is continued, logged
or fed, or how fast it goes, never what it computes (its curves, checkpoints and results are the same).

Every question of a run's identity asks this list:

- a command re-issued into a finished run with only these changed finds it finished (``uavgnn.training.resume``);
- a sweep job's folder is named without them (``uavgnn.runs.directory.job_dir_name``), so a re-issued sweep
  (``resume=auto``, another logger, more threads) finds its jobs' folders;
- ``mode=compare`` groups runs that differ only in these as repeats of one config (a resumed seed beside a fresh
  one is one group).
"""

from __future__ import annotations

# an entry ending in "." is a whole group
INCIDENTAL_KEYS = (
    "hydra.",  # where the run directory is, Hydra's own settings
    "resume",
    "ckpt",  # the other modes' inputs: a training run reads neither
    "path",
    "logger.",  # which dashboard sees the run
    "data.cache_dir",  # where the labelled splits are kept, and how fast they are labelled
    "data.label_workers",
    "hardware.threads",  # how fast data reaches the device and the steps run
    "hardware.sweep_jobs",
    "hardware.num_workers",
    "hardware.pin_memory",
    "hardware.prefetch_factor",
    "hardware.persistent_workers",
    "hardware.memory_fraction",
    "hardware.memory_limit_mb",
    "optim.prefetch",
    "optim.graph_cache",
)


def is_incidental(key: str, also: tuple[str, ...] = ()) -> bool:
    """Whether the config key ``key`` (``hardware.threads``) is one of ``INCIDENTAL_KEYS`` or of ``also`` (more keys
    in the same form: what a resumed run may change besides)."""
    return any(key == entry or (entry.endswith(".") and key.startswith(entry)) for entry in (*INCIDENTAL_KEYS, *also))
