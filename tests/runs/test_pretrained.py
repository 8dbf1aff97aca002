"""The pretrained policy shipped in the package (``ckpt=pretrained``): what it holds, the gap docs/pretrained.md
documents for it (re-measured here against MILP labels solved in this test), and ``export_policy``, which made
it and never replaces a file."""

from __future__ import annotations

import errno
import json
import os
import re
import threading

import pytest
import torch
from conftest import ROOT, run_cli

from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.api import export_policy
from uavgnn.infrastructure.errors import CheckpointError
from uavgnn.infrastructure.storage import replacing
from uavgnn.runs import checkpoints
from uavgnn.runs.checkpoints import CHECKSUMS, DEPLOYED, PRETRAINED_FILE, load_checkpoint


def documented() -> dict[str, float]:
    """The figures of docs/pretrained.md (the README links it): test gap of the model, lap and greedy (%)."""
    section = (ROOT / "docs" / "pretrained.md").read_text()
    found = re.search(r"gap is \*\*(\d+\.\d+)%\*\* .*? lap (\d+\.\d+), greedy (\d+\.\d+)", section, re.S)
    return {"model": float(found[1]), "lap": float(found[2]), "greedy": float(found[3])}


def test_the_pretrained_file_holds_what_deploys_the_16_uav_policy_and_no_more() -> None:
    assert PRETRAINED_FILE.stat().st_size < 500_000  # a few hundred KB
    ckpt = load_checkpoint("pretrained")  # checksums verified
    assert set(ckpt) == {*DEPLOYED, CHECKSUMS}
    config = ckpt["config"]
    assert (config["algorithm"]["name"], config["data"]["n_uav"], config["model"]["name"]) == ("imitation", 16, "small")


@pytest.mark.slow
def test_ckpt_pretrained_evaluates_with_the_documented_gap(tmp_path) -> None:
    run_cli(
        "mode=eval",
        "ckpt=pretrained",
        "eval.shift_sets=[]",
        "eval.positions=[uniform]",
        "eval.keeps=[]",
        "eval.milp_budgets=[]",
        "logger=jsonl",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path / 'eval'}",
        cwd=tmp_path,
    )
    rows = {
        row["method"].split(" ")[0]: row
        for row in json.loads((tmp_path / "eval" / "transfer.json").read_text())["rows"]
    }
    assert rows["model"]["n_uav"] == 16 and rows["model"]["scenes"] == 256
    for method, gap in documented().items():
        assert round(100 * rows[method]["optimality_gap"], 2) == pytest.approx(gap, abs=1e-9), method


def test_export_policy_never_replaces_a_file_and_keeps_the_policy(tmp_path) -> None:
    mine = tmp_path / "mine.pt"
    mine.write_text("my own file")
    with pytest.raises(CheckpointError, match="exists; not replacing it"):
        export_policy(PRETRAINED_FILE, mine)
    assert mine.read_text() == "my own file"
    assert export_policy(PRETRAINED_FILE, tmp_path / "copy.pt") == (tmp_path / "copy.pt").stat().st_size
    original, _, _ = load_policy("pretrained")
    copy, graph, config = load_policy(tmp_path / "copy.pt")
    for a, b in zip(original.state_dict().values(), copy.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert graph.k(16) == load_policy("pretrained")[1].k(16) and config["data"]["n_uav"] == 16


def assert_is_the_pretrained_policy(path) -> None:
    """``path`` loads (every checksum verified) and holds the pretrained policy's weights, bit for bit."""
    assert set(load_checkpoint(path)) == {*DEPLOYED, CHECKSUMS}
    original, copy = load_policy("pretrained")[0], load_policy(path)[0]
    for a, b in zip(original.state_dict().values(), copy.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_export_policy_refuses_a_dangling_symlink_and_leaves_it_one(tmp_path) -> None:
    """``exists()`` follows the link, so a symlink to nothing would pass as free and be replaced: refused, and
    left a symlink."""
    out = tmp_path / "out"
    out.mkdir()
    link = out / "policy.pt"
    link.symlink_to(out / "nowhere.pt")
    with pytest.raises(CheckpointError, match="exists; not replacing it"):
        export_policy(PRETRAINED_FILE, link)
    assert link.is_symlink() and os.readlink(link) == str(out / "nowhere.pt")
    assert sorted(p.name for p in out.iterdir()) == ["policy.pt"]  # nothing written beside it


def test_two_exports_racing_to_one_path_one_succeeds_the_other_is_refused(tmp_path, monkeypatch) -> None:
    """Both could pass an up-front check, then each replace the other's file and both report success: one wins.
    A barrier holds each export just past its check until the other is there too, so they always race."""
    barrier, load = threading.Barrier(2, timeout=60), checkpoints.load_checkpoint

    def load_together(path):
        barrier.wait()
        return load(path)

    monkeypatch.setattr(checkpoints, "load_checkpoint", load_together)
    out, outcomes = tmp_path / "out", []
    out.mkdir()
    destination = out / "policy.pt"

    def export() -> None:
        try:
            outcomes.append(export_policy(PRETRAINED_FILE, destination))
        except CheckpointError as err:
            outcomes.append(err)

    threads = [threading.Thread(target=export) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    sizes = [o for o in outcomes if isinstance(o, int)]
    refused = [str(o) for o in outcomes if isinstance(o, CheckpointError)]
    assert len(sizes) == 1 and sizes[0] == destination.stat().st_size
    assert refused == [f"export_policy: {destination} exists; not replacing it (remove it first)"]
    assert sorted(p.name for p in out.iterdir()) == ["policy.pt"]  # the loser's temp file is gone
    monkeypatch.undo()
    assert_is_the_pretrained_policy(destination)


@pytest.mark.parametrize("hard_links", [True, False])
def test_a_new_file_never_replaces_what_took_its_path_meanwhile(tmp_path, monkeypatch, hard_links) -> None:
    """``storage.replacing(new=True)`` (what ``export_policy`` writes through): another writer takes the path while
    the file
    is written - here a dangling symlink - and keeps it, with or without hard links on the filesystem (without,
    the file is created ``O_EXCL``). Where the path stays free the file appears whole."""
    if not hard_links:

        def no_hard_links(*_args, **_kwargs):
            raise OSError(errno.EPERM, "Operation not permitted")

        monkeypatch.setattr(os, "link", no_hard_links)
    out = tmp_path / "out"
    out.mkdir()
    taken = out / "taken.pt"
    with pytest.raises(FileExistsError):
        with replacing(taken, new=True) as tmp:
            tmp.write_bytes(b"mine")
            taken.symlink_to(out / "theirs.pt")
    assert taken.is_symlink() and not (out / "theirs.pt").exists()
    with replacing(out / "free.pt", new=True) as tmp:
        tmp.write_bytes(b"mine")
    assert (out / "free.pt").read_bytes() == b"mine" and not (out / "free.pt").is_symlink()
    umask = os.umask(0)
    os.umask(umask)
    assert (out / "free.pt").stat().st_mode & 0o777 == 0o666 & ~umask  # a new file's mode, not the temp's 0600
    assert sorted(p.name for p in out.iterdir()) == ["free.pt", "taken.pt"]  # no temp file left
