"""benchmarks/swarm_seeds.py: several seeds' mode=eval reports in one table, worked by hand."""

from __future__ import annotations

import importlib.util
import json
import math

from conftest import ROOT

spec = importlib.util.spec_from_file_location("swarm_seeds", ROOT / "benchmarks" / "swarm_seeds.py")
swarm_seeds = importlib.util.module_from_spec(spec)
spec.loader.exec_module(swarm_seeds)


def report(policy: float, local: float, collisions: float = 32.0, cbba: float = 9.0) -> dict:
    """One seed's eval.json at 16 UAVs, 40 steps, nominal: the policy's, the decentralised planner's and CBBA's
    returns (planner 10), the policy's collisions (16 for the planners); each method 2 s for the set, CBBA in 8
    rounds of 32 messages per UAV."""
    rows = [
        {
            "n_uav": 16,
            "test_set": "nominal",
            "method": name,
            "return": ret,
            "of_planner": ret / 10,
            "collisions": hit,
            "time_s": 2.0,
            **extra,
        }
        for name, ret, hit, extra in (
            ("mappo", policy, collisions, {"rounds": 1.0, "messages_per_uav": 4.0}),
            ("scripted planner", 10.0, 16.0, {}),
            ("decentralised planner", local, 16.0, {"rounds": 1.0, "messages_per_uav": 4.0}),
            ("CBBA", cbba, 16.0, {"rounds": 8.0, "messages_per_uav": 32.0}),
        )
    ]
    return {"algorithm": "mappo", "horizon": 40, "rows": rows}


def test_seeds_are_summarised_per_size_set_and_method_by_hand(tmp_path) -> None:
    rows = swarm_seeds.seed_rows([report(9.0, 8.0, 8.0), report(9.5, 7.5, 16.0), report(8.5, 8.5, 24.0)])
    mappo = next(r for r in rows if r["method"] == "mappo")
    assert (mappo["seeds"], mappo["of_planner_pct"], mappo["std"]) == (3, 90.0, 5.0)
    half = 4.302653 * 5.0 / math.sqrt(3)  # Student's t, 2 degrees of freedom
    assert mappo["ci95"] == f"[{90 - half:.1f}, {90 + half:.1f}]"
    assert mappo["of_decentralised_pct"] == round(100 * 9.0 / 8.0, 1)  # means: (9 + 9.5 + 8.5) / 3 over 8
    assert mappo["collisions_per_uav"] == 1.0  # (8 + 16 + 24) / 3 collisions over 16 UAVs
    assert mappo["of_cbba_pct"] == 100.0  # 9 over CBBA's 9
    cbba = next(r for r in rows if r["method"] == "CBBA")
    assert (cbba["step_ms"], cbba["rounds"], cbba["messages_per_uav"]) == (50.0, 8.0, 32.0)  # 2 s over 40 steps
    assert "rounds" not in next(r for r in rows if r["method"] == "scripted planner")  # it sends no messages
    assert next(r for r in rows if r["method"] == "scripted planner")["collisions_per_uav"] == 1.0
    for seed, values in enumerate(((9.0, 8.0), (9.5, 7.5))):
        (tmp_path / str(seed)).mkdir()
        (tmp_path / str(seed) / "eval.json").write_text(json.dumps(report(*values)))
    assert swarm_seeds.main([str(tmp_path / "0"), str(tmp_path / "1"), "--markdown"]) == 0
    assert swarm_seeds.main([str(tmp_path / "0"), str(tmp_path / "missing")]) == 2
