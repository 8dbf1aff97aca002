"""``mode=cache`` (``uavgnn.modes.cache``): ``action=verify`` gives a reason per damaged entry; ``action=clear``
deletes only the entries proven to be uavgnn's, refuses a checkout, a home, the root or a system directory, and on
read-only media deletes nothing, in one line."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest
from conftest import cli, namespace, one_error_line, read_only, run_cli, snapshot, start, wait_for

from uavgnn.data.cache import BuildSettings, SplitSpec, load_or_build
from uavgnn.infrastructure.errors import StorageError
from uavgnn.modes.cache import clear
from uavgnn.problem.scenes import SceneDistribution

SPEC, SETTINGS = SplitSpec("train", 6, 12, 7), BuildSettings(k_max=8, uav_neighbours=3, label_time_limit=5.0)


def proven_entry(root: Path, name: str, marker: str | None = None, size: int = 1000) -> Path:
    """A directory shaped like a cache entry, with the marker a build writes (``marker``: its hash, or another)."""
    (root / name / "deep").mkdir(parents=True)
    (root / name / "deep" / "graphs.pt").write_bytes(b"\0" * size)
    (root / name / ".uavgnn-cache").write_text(marker or name[-16:])
    return root / name


@pytest.mark.slow
def test_cache_verify_gives_a_reason_per_damaged_entry(tmp_path) -> None:
    load_or_build(SPEC, SceneDistribution(), SETTINGS, tmp_path / "cache", workers=1)
    (directory,) = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    (directory / "manifest.json").write_text("[]")
    proc = run_cli(
        "mode=cache",
        "action=verify",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 1 and "DAMAGED: manifest of the wrong shape" in proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_cache_clear_deletes_only_proven_cache_entries_and_counts_their_real_size(tmp_path) -> None:
    """``data.cache_dir=/tmp/x`` must not delete the user's Documents/ and projects/ there: only entries with
    uavgnn's marker go; a look-alike without it, one whose marker names another hash, a symlinked entry (whose
    target holds a valid marker) and a symlink to the user's files are left alone, and the size counts every file
    below."""
    user = tmp_path / "x"
    load_or_build(SPEC, SceneDistribution(), SETTINGS, user, workers=1)  # a real cache entry, built by uavgnn
    (user / "Documents").mkdir()
    (user / "Documents" / "thesis.tex").write_text("years of work")
    (user / "projects" / "uav").mkdir(parents=True)
    (user / "projects" / "uav" / "notes.md").write_text("do not lose")
    proven_entry(user, "train-n6-00000000000000aa", marker=None).joinpath(".uavgnn-cache").unlink()  # no marker
    proven_entry(user, "val-n6-00000000000000bb", marker="00000000000000cc")  # marker of another hash
    outside = proven_entry(tmp_path, "test-n6-00000000000000dd")  # a valid entry, but outside the cache dir
    (user / "test-n6-00000000000000dd").symlink_to(outside)
    (user / "elsewhere").symlink_to(tmp_path / "Documents-elsewhere", target_is_directory=True)
    (tmp_path / "Documents-elsewhere").mkdir()
    (tmp_path / "Documents-elsewhere" / "keep.txt").write_text("keep")
    ours = [p.name for p in user.iterdir() if p.name.startswith("train-n6-") and (p / "manifest.json").exists()]
    size = sum(f.stat().st_size for f in (user / ours[0]).rglob("*") if f.is_file())
    kept = {k: v for k, v in snapshot(user).items() if not k.startswith(ours[0])}
    outside_before = snapshot(tmp_path / "Documents-elsewhere") | snapshot(outside)
    proc = run_cli(
        "mode=cache",
        "action=clear",
        "force=true",
        f"data.cache_dir={user}",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert "Traceback" not in proc.stderr and f"{size / 2**20:.2f}" in proc.stdout, proc.stdout + proc.stderr
    assert "removed 1 cache from" in proc.stdout and "left alone in" in proc.stdout
    assert not (user / ours[0]).exists()
    assert snapshot(user) == kept and snapshot(tmp_path / "Documents-elsewhere") | snapshot(outside) == outside_before
    assert not (tmp_path / "run").exists()  # a utility mode that wrote nothing leaves no run directory


@pytest.mark.slow
def test_cache_clear_refuses_a_checkout_home_root_or_system_directory(tmp_path, monkeypatch) -> None:
    """A checkout, the root, a home or a system directory is never cleared (``data.cache_dir=.`` in a checkout
    would take .git and the sources; ``/`` would offer every cache on the machine), even one holding a proven
    entry: refused in one line, nothing deleted."""
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    proven_entry(checkout, "train-n6-00000000000000ee")  # even a proven entry is not cleared from a checkout
    before = snapshot(checkout)
    proc = run_cli(
        "mode=cache",
        "action=clear",
        "force=true",
        "data.cache_dir=.",
        f"hydra.run.dir={tmp_path / 'r'}",
        cwd=checkout,
        check=False,
    )
    assert proc.returncode == 2 and "is a checkout (it holds .git)" in one_error_line(proc, "error:")
    assert snapshot(checkout) == before
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    for root, reason in (
        ("/", "is the root directory"),
        ("/usr", "/usr is a system directory"),
        (str(tmp_path / "home"), "is a home directory"),
    ):
        with pytest.raises(StorageError, match=re.escape(reason)):
            clear(root, force=True)


@pytest.mark.slow
def test_cache_clear_on_a_read_only_cache_is_one_line_and_deletes_nothing(tmp_path) -> None:
    cache = tmp_path / "cache"
    proven_entry(cache, "train-n6-00000000000000ff")
    before = snapshot(cache)
    clear_it = cli(
        "mode=cache", "action=clear", "force=true", f"data.cache_dir={cache}", f"hydra.run.dir={tmp_path / 'run'}"
    )
    proc = namespace(f"{read_only(cache)} && cd {tmp_path} && {clear_it}; echo EXIT=$?")
    assert "EXIT=2" in proc.stdout and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "Read-only file system (the directory is not writable" in proc.stderr and "removed 0 caches" in proc.stderr
    assert snapshot(cache) == before


@pytest.mark.slow
@pytest.mark.heavy  # the suite's time: pytest -m heavy tests/modes/test_cache_mode.py
def test_a_stopped_cache_build_leaves_nothing_verify_calls_damaged(tmp_path) -> None:
    """SIGTERM during a build: its entry goes with it. kill -9 (nothing can run): the marker-only entry left is
    listed as an unfinished build, not damaged (exit 0), and the next run builds it."""
    cache = tmp_path / "cache"
    slow = ["experiment=debug", "data.n_uav=48", "data.train_scenes=4000", f"data.cache_dir={cache}", "logger=none"]
    for signum in (signal.SIGTERM, signal.SIGKILL):
        proc = start(*slow, f"hydra.run.dir={tmp_path / signum.name}", cwd=tmp_path)
        wait_for(lambda: any(p.is_dir() for p in cache.glob("train-*")) or proc.poll() is not None, "a build")
        time.sleep(0.5)  # well into the labels
        proc.send_signal(signum)
        proc.wait(timeout=60)
        entries = [p for p in cache.glob("train-*") if p.is_dir()]
        assert proc.returncode == (143 if signum == signal.SIGTERM else -9)
        assert entries == [] if signum == signal.SIGTERM else len(entries) == 1
    verify = run_cli("mode=cache", "action=verify", f"data.cache_dir={cache}", cwd=tmp_path, check=False)
    assert verify.returncode == 0 and "unfinished build, nothing written: built when next needed" in verify.stdout
    assert "0 damaged" in verify.stdout and "Traceback" not in verify.stderr
