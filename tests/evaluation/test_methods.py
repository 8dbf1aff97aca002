"""The methods compared on a test set (``uavgnn.evaluation.methods``): where the MILP proved no optimum, each gap
is against the best assignment any method found, and the table says how many references are proven."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch

from uavgnn.config.settings import transformer
from uavgnn.evaluation.methods import Controls, compare_on_split
from uavgnn.models import model_from_config
from uavgnn.problem.graphs import GraphSettings


def test_where_no_optimum_is_proven_the_gaps_are_against_the_best_assignment_found(labelled_store) -> None:
    model = model_from_config(transformer(SimpleNamespace(hidden=32, heads=1, layers=1, dropout=0.0, ffn_mult=2)))
    graph = GraphSettings(k_max=16, uav_neighbours=6)
    controls = Controls(keeps=(2,))
    rows, _ = compare_on_split(model, labelled_store, "greedy", graph, 8, torch.device("cpu"), controls=controls)
    assert [r["method"] for r in rows] == [
        "model (greedy)",
        "model-pruned milp (keep 2)",
        "greedy",
        "lap",
        "mcf",
        "mcf + repair",
        "milp",
    ]
    n = len(labelled_store)
    assert all(math.isfinite(r["optimality_gap"]) and r["reference_optimal"] == f"{n}/{n}" for r in rows)
    # scene 3 stopped at its time limit with the optimum as incumbent: nothing beats it, every gap is as before
    status = list(labelled_store.status)
    status[3] = "time_limit"
    unproven = dataclasses.replace(labelled_store, status=status)
    again, _ = compare_on_split(model, unproven, "greedy", graph, 8, torch.device("cpu"), controls=controls)
    assert [r["optimality_gap"] for r in again] == pytest.approx([r["optimality_gap"] for r in rows])
    assert all(r["reference_optimal"] == f"{n - 1}/{n}" for r in again)
    # ... with all idle as incumbent: the reference is the best another method found, the MILP's row 100% off there
    tensors = dict(labelled_store.tensors, label_assignment=labelled_store.tensors["label_assignment"].clone())
    tensors["label_assignment"][int(labelled_store.uav_ptr[3]) : int(labelled_store.uav_ptr[4])] = -1
    objective = labelled_store.objective.clone()
    objective[3] = 0.0
    idle = dataclasses.replace(unproven, tensors=tensors, objective=objective)
    rows, _ = compare_on_split(model, idle, "greedy", graph, 8, torch.device("cpu"), controls=controls)
    assert rows[-1]["method"] == "milp" and rows[-1]["optimality_gap"] == pytest.approx(1 / n)
    assert min(r["optimality_gap"] for r in rows[:-1]) >= 0.0
