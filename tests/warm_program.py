"""The tests' ``python run.py ...`` without its ~5 s of imports (torch, PyG, Hydra) each time: a Python that has
imported what ``run.py`` imports and nothing else, and forks a child per run that goes on as a fresh interpreter
would (``conftest.run_cli``). The child gets the run's folder, environment and arguments, writes its output to the
files it is given, and exits with the program's code.

Protocol, one JSON line each way per run: {argv, cwd, env, stdout, stderr, timeout} in, {returncode, timed_out}
out. It ends when its input does (its pytest worker ended).
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import select
import signal
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITE = sys.path[1:]  # the interpreter's own paths (this script's folder is the first)
sys.path.insert(0, str(ROOT))  # as for python run.py: the checkout first
import uavgnn.cli  # noqa: E402, F401  (what run.py imports)


def exit_code(exc: SystemExit) -> int:
    """The process's exit status for ``sys.exit(code)``, as the interpreter makes it."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)
    return 1


def run(request: dict) -> None:
    """In the forked child: set up as ``python run.py ARGV`` in ``cwd`` with ``env``, run it, and exit."""
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[:] = [str(ROOT), *SITE]  # PYTHONPATH: as the warm program's (conftest.WarmProgram.fits)
        for fd, path in ((0, os.devnull), (1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_RDONLY if fd == 0 else os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        sys.stdin, sys.stdout = open(0, closefd=False), open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False, errors="backslashreplace")
        sys.argv = [str(ROOT / "run.py"), *request["argv"]]
        try:
            runpy.run_path(str(ROOT / "run.py"), run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exit_code(exc)
        except BaseException:
            traceback.print_exc()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def serve() -> None:
    protocol = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            run(request)
        finished = os.pidfd_open(pid)
        timed_out = not select.select([finished], [], [], request["timeout"])[0]
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        os.close(finished)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        protocol.write(json.dumps({"returncode": status, "timed_out": timed_out}) + "\n")
        protocol.flush()


if __name__ == "__main__":
    serve()
