"""User-facing errors: each ends a run with a one-line message naming what is wrong.

Kept in a module with no heavy imports so the entry point can catch them
without loading torch first (a config typo should fail in a second).
"""


class SceneFileError(ValueError):
    """A scene file that cannot be used, with the field and value at fault."""


class ProblemTooLarge(ValueError):
    """A solver declines an instance above its documented size."""


class TrainingDiverged(RuntimeError):
    """Too many consecutive non-finite losses."""


class ConfigError(ValueError):
    """A config value outside what the run can use (types and keys are checked by Hydra)."""
