"""The pretrained policy shipped in the package (``ckpt=pretrained``): what it holds, the gap the README
documents for it (re-measured here against MILP labels solved in this test), and ``export_policy``, which made
it and never replaces a file."""

from __future__ import annotations

import json
import re

import pytest
import torch
from conftest import ROOT, run_cli

from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.api import export_policy
from uavgnn.checkpoints import CHECKSUMS, DEPLOYED, PRETRAINED_FILE, load_checkpoint
from uavgnn.errors import CheckpointError


def documented() -> dict[str, float]:
    """The figures of the README's "Pretrained policy" section: test gap of the model, lap and greedy (%)."""
    section = (ROOT / "README.md").read_text().split("## Pretrained policy", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"gap is \*\*(\d+\.\d+)%\*\* .*? lap (\d+\.\d+), greedy (\d+\.\d+)", section, re.S)
    return {"model": float(found[1]), "lap": float(found[2]), "greedy": float(found[3])}


def test_the_pretrained_file_holds_what_deploys_the_16_uav_policy_and_no_more() -> None:
    assert PRETRAINED_FILE.stat().st_size < 500_000  # a few hundred KB
    ckpt = load_checkpoint("pretrained")  # checksums verified
    assert set(ckpt) == {*DEPLOYED, CHECKSUMS}
    config = ckpt["config"]
    assert (config["algorithm"]["name"], config["data"]["n_uav"], config["model"]["name"]) == ("imitation", 16,
                                                                                                 "small")


@pytest.mark.slow
def test_ckpt_pretrained_evaluates_with_the_documented_gap(tmp_path) -> None:
    run_cli("mode=eval", "ckpt=pretrained", "eval.shift_sets=[]", "eval.positions=[uniform]", "eval.keeps=[]", "eval.milp_budgets=[]",
            "logger=jsonl",
            f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'eval'}", cwd=tmp_path)
    rows = {row["method"].split(" ")[0]: row for row in json.loads((tmp_path / "eval" / "transfer.json").read_text())
            ["rows"]}
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
