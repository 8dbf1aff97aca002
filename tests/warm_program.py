"""The tests' ``python run.py ...`` without its ~5 s of imports (torch, PyG, Hydra) each time: a Python that has
imported what ``run.py`` imports and nothing else, and forks a child per run that goes on as a fresh interpreter
would (``conftest.run_cli``). The child gets the run's folder, environment and arguments and exits with the
program's code; its output is read until every process holding it has closed it, as ``subprocess.run`` with
``capture_output`` does (a process the run leaves behind still holds up the test), and written to the files given.

Protocol, one JSON line each way per run: {argv, cwd, env, stdout, stderr, timeout} in, {returncode, timed_out}
out. It ends when its input does (its pytest worker ended).
"""

from __future__ import annotations

import os
import sys

PROTOCOL = os.fdopen(os.dup(1), "w")  # the answers; what the imports print goes to stderr, not into them
os.dup2(2, 1)

import atexit  # noqa: E402
import json  # noqa: E402
import runpy  # noqa: E402
import selectors  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SITE = sys.path[1:]  # the interpreter's own paths (this script's folder is the first)
sys.path.insert(0, str(ROOT))  # as for python run.py: the checkout first
import uavgnn.program.cli  # noqa: E402, F401  (what run.py imports)


def exit_code(exc: SystemExit) -> int:
    """The process's exit status for ``sys.exit(code)``, as the interpreter makes it."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)
    return 1


def run(request: dict, out: int, err: int) -> None:
    """In the forked child: set up as ``python run.py ARGV`` in ``cwd`` with ``env``, its output into the pipes
    ``out`` and ``err``; run it, and exit as the interpreter would."""
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[:] = [str(ROOT), *SITE]  # PYTHONPATH: as the warm program's (conftest.WarmProgram.fits)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in (out, err, PROTOCOL.fileno()):
            os.close(fd)
        sys.stdin = sys.__stdin__ = open(0, closefd=False)
        sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)
        sys.stderr = sys.__stderr__ = open(2, "w", closefd=False, errors="backslashreplace", buffering=1)
        sys.argv = [str(ROOT / "run.py"), *request["argv"]]
        try:
            runpy.run_path(str(ROOT / "run.py"), run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exit_code(exc)
        except KeyboardInterrupt:
            traceback.print_exc()
            code = -signal.SIGINT
        except BaseException:
            traceback.print_exc()
        threading._shutdown()  # what the interpreter does at exit: join threads, then the atexit functions
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        if code == -signal.SIGINT:  # died of the interrupt, as an interpreter does
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code)


def capture(outputs: dict[int, Path], timeout: float) -> bool:
    """Copy each pipe to its file until every writer has closed it; False if that takes past ``timeout``."""
    deadline = time.monotonic() + timeout
    files = {fd: path.open("wb") for fd, path in outputs.items()}
    try:
        with selectors.DefaultSelector() as selector:
            for fd in files:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                for key, _ in selector.select(left):
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        files[key.fd].write(data)
                    else:
                        selector.unregister(key.fd)
        return True
    finally:
        for fd, file in files.items():
            file.close()
            os.close(fd)


def serve() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        (out_read, out_write), (err_read, err_write) = os.pipe(), os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(out_read)
            os.close(err_read)
            run(request, out_write, err_write)
        os.close(out_write)
        os.close(err_write)
        outputs = {out_read: Path(request["stdout"]), err_read: Path(request["stderr"])}
        timed_out = not capture(outputs, request["timeout"])
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        PROTOCOL.write(json.dumps({"returncode": status, "timed_out": timed_out}) + "\n")
        PROTOCOL.flush()


if __name__ == "__main__":
    serve()
