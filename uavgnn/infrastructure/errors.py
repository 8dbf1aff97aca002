"""User-facing errors: each ends a run with a one-line message naming what is wrong.

Kept in a module with no heavy imports so the entry point can catch them
without loading torch first (a config typo should fail in a second).
"""


class SceneFileError(ValueError):
    """A scene file that cannot be used, with the field and value at fault."""


class ProblemTooLarge(ValueError):
    """A solver declines an instance above its documented size."""


class MemoryBudgetError(ValueError):
    """An allocation refused before it is made: its estimated size and the memory available, named."""


class TrainingDiverged(RuntimeError):
    """Too many consecutive non-finite losses, or weights that blew up, with no good state left to roll back to."""


class ConfigError(ValueError):
    """A config value outside what the run can use (types and keys are checked by Hydra)."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: unreadable, truncated, not ours, or holding code that would run on load."""


class StorageError(RuntimeError):
    """A file or directory that cannot be written (read-only, no space left, ...), named with the cause."""


class RunDirectoryError(RuntimeError):
    """A run directory that holds another run, that another live process is training into, or whose record
    (its history) is damaged."""


class Interrupted(BaseException):
    """SIGINT/SIGTERM: the run stopped (cleanly at the end of a step while training), saying how to resume. A
    ``BaseException``, as ``KeyboardInterrupt`` is: no ``except Exception`` on the way turns it into another error."""

    def __init__(self, message: str, exit_code: int, saved_step: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.saved_step = saved_step  # training stopped at the end of this step, last.pt written (None: elsewhere)
