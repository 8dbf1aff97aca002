"""Composing the command line's config (``uavgnn.program``): an interpolation that cannot be resolved is one line
naming the key, and leaves nothing behind."""

from __future__ import annotations

from conftest import SMALL, one_error_line, run_cli


def test_unresolvable_interpolations_are_one_line_and_leave_nothing_behind(tmp_path) -> None:
    """An interpolation that cannot be resolved (``${oc.env:NOPE}``) is one line naming the key, in a key or in
    hydra.run.dir, not a traceback (that left .hydra/, run.log and a lock behind) nor "an error during Hydra's
    exception formatting"; nothing is left behind."""
    for override, key in (
        ("model.hidden=${oc.env:NOPE}", "model.hidden"),
        ("hardware=high_mem model.hidden=${oc.env:NOPE}", "model.hidden"),  # the hardware preset's note reads it
        ("data.cache_dir=${oc.env:NOPE}", "data.cache_dir"),
        (f"hydra.run.dir=${{oc.env:NOPE}}/{tmp_path}/x", "hydra.run.dir"),
    ):
        run = tmp_path / "run"
        proc = run_cli(
            *SMALL,
            *override.split(),
            *([] if key == "hydra.run.dir" else [f"hydra.run.dir={run}"]),
            cwd=tmp_path,
            check=False,
        )
        line = one_error_line(proc, "error:")
        assert proc.returncode == 2 and f"{key}: cannot be resolved" in line and "NOPE" in line, line
        assert not run.exists() and "exception formatting" not in proc.stderr
