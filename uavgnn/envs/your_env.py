"""Your environment class (``env.target``) raising inside a run: the one line that names it, and your frames."""

from __future__ import annotations

import traceback

from uavgnn.envs.uav_env import UAVEnv, env_class
from uavgnn.infrastructure.errors import ConfigError, MemoryBudgetError
from uavgnn.infrastructure.user_code import frames_in


def raised_by_your_env(target: str | None, err: BaseException) -> str | None:
    """Where ``err`` came out of your environment's own code (``env.target``): what says so, naming the class, its
    method and the exception in one line, then your frames only (not the training loop's); None otherwise."""
    if target is None or isinstance(err, (ConfigError, MemoryBudgetError)):
        return None
    try:
        found = env_class(target)
    except ConfigError:  # not importable any more: the error is not one of its
        return None
    yours = found.__mro__[: found.__mro__.index(UAVEnv)]
    frames = frames_in(err, list(yours))
    if not frames:
        return None
    lines = str(err).strip().splitlines()
    shown = "".join(traceback.format_list(frames)).rstrip()
    return (
        f"env.target={target}: {found.__name__}.{frames[0].name} raised {type(err).__name__}: "
        f"{lines[0][:200] if lines else '(no message)'}\nin your code (most recent call last):\n{shown}"
    )
