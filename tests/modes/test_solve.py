import json

import numpy as np
import pytest
from conftest import run_cli

from uavgnn.problem.metrics import assignment_metrics
from uavgnn.problem.scene_io import load_scene, save_scene, scene_to_dict


@pytest.mark.slow
@pytest.mark.parametrize(
    "solver", ["milp", *(pytest.param(s, marks=pytest.mark.heavy) for s in ("greedy", "lap", "mcf"))]
)
def test_solve_writes_checkable_results(tmp_path, solver) -> None:
    out = tmp_path / "run"
    proc = run_cli("mode=solve", f"solver={solver}", "solve.n_uav=12", f"hydra.run.dir={out}", cwd=tmp_path)
    assert "completion_score" in proc.stdout  # the table
    scene, _ = load_scene(out / "scene.json")
    assert scene.n_uav == 12
    assignment = np.array(json.loads((out / "assignment.json").read_text())["assignment"])
    metrics = json.loads((out / "metrics.json").read_text())
    recomputed = assignment_metrics([scene], [assignment])
    assert metrics["reward"] == pytest.approx(float(recomputed["reward"][0]))
    assert metrics["infeasible"] == 0
    assert metrics["optimality_gap"] >= -1e-9
    if solver == "milp":
        assert metrics["status"] == "optimal" and metrics["optimality_gap"] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.slow
def test_solve_with_a_rule_pruning_the_milp(tmp_path) -> None:
    """``solver=pruned``: the control of the model-guided MILP, one scene, its time split logged; unpruned
    (``solve.keep`` at least the targets) it is the MILP's optimum."""
    for keep, pruner in ((1, "relaxation"), (12, "nearest")):
        out = tmp_path / f"run{keep}"
        proc = run_cli(
            "mode=solve",
            "solver=pruned",
            f"solve.pruner={pruner}",
            f"solve.keep={keep}",
            "solve.n_uav=12",
            f"hydra.run.dir={out}",
            cwd=tmp_path,
        )
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["solver"] == f"{pruner}-pruned milp" and metrics["status"] == "kept_pairs_optimal"
        assert f"{pruner}-pruned milp: scores" in proc.stdout + proc.stderr and metrics["infeasible"] == 0
        assert metrics["optimality_gap"] >= -1e-9 and (keep == 1 or metrics["optimality_gap"] == pytest.approx(0.0))


@pytest.mark.slow
def test_solve_a_scene_file(tmp_path, hand_scene) -> None:
    save_scene(tmp_path / "mine.npz", hand_scene)
    out = tmp_path / "run"
    run_cli("mode=solve", "task=file", f"task.file={tmp_path / 'mine.npz'}", f"hydra.run.dir={out}", cwd=tmp_path)
    metrics = json.loads((out / "metrics.json").read_text())
    # hand-worked optimum: UAV0 -> T0, UAV1 + UAV2 -> T1: 7 - 0.5 * 7 = 3.5
    assert metrics["reward"] == pytest.approx(3.5)


@pytest.mark.slow
def test_bad_scene_file_fails_cleanly(tmp_path, hand_scene) -> None:
    raw = scene_to_dict(hand_scene)
    raw["target_need"] = [1, 0]
    (tmp_path / "bad.json").write_text(json.dumps(raw))
    proc = run_cli(
        "mode=solve",
        "task=file",
        f"task.file={tmp_path / 'bad.json'}",
        f"hydra.run.dir={tmp_path / 'o'}",
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2
    assert "field 'target_need' value 0 at index 1 violates 'need >= 1'" in proc.stderr
    assert "Traceback" not in proc.stderr
