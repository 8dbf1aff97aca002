"""Writing files safely (``uavgnn.infrastructure.storage``) on real read-only and full filesystems (private mounts
in a user + mount namespace): an intact cache on read-only media is used; a read-only or full run or cache directory
is one line naming the path and the cause, with no partial file left; a rewrite keeps the file's permissions; the
operating system's own directories are refused as run, sweep or cache directories, and only those."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import SMALL, cli, namespace, one_error_line, read_only, run_cli, small

from uavgnn.infrastructure.storage import atomic_write, system_path_problem


@pytest.mark.slow
@pytest.mark.heavy  # two training runs (15 s); the read-only run/cache error drill below runs by default
def test_an_intact_cache_on_read_only_media_is_used(tmp_path) -> None:
    run_cli(*small(tmp_path, tmp_path / "first", "train.steps=4"), cwd=tmp_path)  # builds the cache
    second = cli(*small(tmp_path, tmp_path / "second", "train.steps=4"))
    proc = namespace(f"{read_only(tmp_path / 'cache')} && cd {tmp_path} && {second}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("cache hit") + proc.stderr.count("cache hit") >= 3  # train, val and test


@pytest.mark.slow
def test_read_only_run_or_cache_directory_is_one_line_naming_it(tmp_path) -> None:
    ro = tmp_path / "ro"
    (ro / "run").mkdir(parents=True)
    (ro / "cache").mkdir()
    run_on_ro = cli(*small(tmp_path, ro / "run"))
    cache_on_ro = cli(*SMALL, f"data.cache_dir={ro / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}")
    proc = namespace(f"{read_only(ro)} && cd {tmp_path} && {run_on_ro}; echo EXIT=$?; {cache_on_ro}; echo EXIT=$?")
    assert proc.stdout.count("EXIT=2") == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"cannot write {ro / 'run'}: Read-only file system" in proc.stderr
    assert f"cannot write {ro / 'cache'}/train-n6-" in proc.stderr and "Read-only file system" in proc.stderr


@pytest.mark.slow
@pytest.mark.heavy  # 15 s (CI margin); storage errors by default: the read-only run/cache drill
def test_disk_full_while_writing_a_checkpoint_or_the_cache(tmp_path) -> None:
    full = tmp_path / "full"
    tiny = tmp_path / "tiny"
    full.mkdir()
    tiny.mkdir()
    run_on_full = cli(*small(tmp_path, full / "run", "train.ckpt_every=5"))  # its cache on the roomy disk
    cache_on_full = cli(*SMALL, f"data.cache_dir={tiny}", f"hydra.run.dir={tmp_path / 'run'}")
    proc = namespace(
        f"mount -t tmpfs -o size=160k tmpfs {full} && mount -t tmpfs -o size=16k tmpfs {tiny} && "
        f"cd {tmp_path} && {run_on_full}; echo EXIT=$?; echo LS; ls -A {full / 'run'}; echo END; "
        f"{cache_on_full}; echo EXIT=$?; echo LS; ls -A {tiny}; echo END"
    )
    assert proc.stdout.count("EXIT=2") == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"cannot write {full / 'run' / 'last.pt'}: No space left on device" in proc.stderr
    assert f"cannot write {tiny}/train-n6-" in proc.stderr
    listed_run, listed_cache = [block.split("END")[0].split() for block in proc.stdout.split("\nLS\n")[1:]]
    assert "metrics.jsonl" in listed_run  # the history written so far is kept ...
    assert not [name for name in listed_run if name.endswith(".tmp") or name == "last.pt"]  # ... no partial file
    assert not [name for name in listed_cache if not name.endswith(".lock")]  # no half-built cache


def test_rewritten_files_keep_their_permissions(tmp_path) -> None:
    """mkstemp's 0600 would survive the rename, so a rewritten history or config would lose its readers on a
    shared cluster directory. A rewrite keeps the file's mode; a new file gets 0666 less the umask."""
    shared = tmp_path / "metrics.jsonl"
    shared.write_text("old")
    shared.chmod(0o644)
    atomic_write(shared, b"new")
    created = tmp_path / "new.json"
    atomic_write(created, b"{}")
    umask = os.umask(0)
    os.umask(umask)
    assert shared.read_bytes() == b"new" and shared.stat().st_mode & 0o777 == 0o644
    assert created.stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.slow
@pytest.mark.heavy  # ~20 s: left out of the default suite for time
def test_system_directories_are_refused_as_run_sweep_or_cache_directories(tmp_path) -> None:
    """Run as root, hydra.run.dir=/etc would write checkpoints, logs and a picture into /etc: a system directory is
    refused as a run, sweep or cache directory, in one line, before anything is written there."""
    for override, key in (
        ("hydra.run.dir=/usr/share/uavgnn-drill", "hydra.run.dir=/usr/share/uavgnn-drill"),
        ("data.cache_dir=/usr/lib/uavgnn-drill", "data.cache_dir=/usr/lib/uavgnn-drill"),
    ):
        proc = run_cli(
            *SMALL,
            override,
            *([] if "hydra" in override else [f"hydra.run.dir={tmp_path / 'r'}"]),
            cwd=tmp_path,
            check=False,
        )
        line = one_error_line(proc, "error:")
        assert proc.returncode == 2 and key in line and "system directory" in line, line
    assert not Path("/usr/share/uavgnn-drill").exists() and not Path("/usr/lib/uavgnn-drill").exists()
    proc = run_cli("-m", *SMALL, "seed=0,1", "hydra.sweep.dir=/boot/uavgnn-drill", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "hydra.sweep.dir=/boot/uavgnn-drill" in one_error_line(proc, "error:")


def test_system_paths_are_the_systems_own_trees_not_every_path_below_usr_or_var() -> None:
    """A rule refusing all of /usr and /var would refuse Docker's /usr/src/app, Jenkins'
    /var/lib/jenkins/workspace and Fedora Atomic's /var/home; those are allowed, the system's own are not."""
    for refused in (
        "/",
        "/etc/x",
        "/usr",
        "/usr/src",
        "/usr/lib/x",
        "/usr/local/bin/x",
        "/var",
        "/var/lib",
        "/run/user",
        "/boot/x",
        "/dev/null",
        "/proc/1",
    ):
        assert system_path_problem(refused), refused
    for allowed in (
        "/usr/src/app/outputs",
        "/var/lib/jenkins/workspace",
        "/var/home/alice/runs",
        "/run/user/1000/x",
        "/dev/shm/cache",
        "/var/tmp/x",
        "/usr/local/src/p",
        "/tmp/x",
        "/home/alice/x",
    ):
        assert system_path_problem(allowed) is None, allowed
