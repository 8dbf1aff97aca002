"""Where the MILP proved no optimum, every method of the table is also measured against a certified bound
(``uavgnn.solvers.bound``): how far from the optimum it is at most, checked against the whole LP relaxation solved
independently (HiGHS's interior point, on the MILP's own formulation)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import whole_lp

from uavgnn.config.settings import transformer
from uavgnn.evaluation.methods import compare_on_split
from uavgnn.models import model_from_config
from uavgnn.problem.graphs import GraphSettings
from uavgnn.problem.metrics import reward


def test_without_a_proven_optimum_each_method_has_a_gap_to_the_certified_bound(labelled_store) -> None:
    model = model_from_config(transformer(SimpleNamespace(hidden=32, heads=1, layers=1, dropout=0.0, ffn_mult=2)))
    graph = GraphSettings(k_max=16, uav_neighbours=6)
    proven, _ = compare_on_split(model, labelled_store, "greedy", graph, 8, torch.device("cpu"))
    assert not any("bound_gap" in row for row in proven) and "bound" not in proven[-1]["note"]  # every optimum proven
    status = list(labelled_store.status)
    status[3] = "time_limit"  # its optimum no longer proven: bounded by the LP there
    unproven = dataclasses.replace(labelled_store, status=status)
    rows, evaluation = compare_on_split(model, unproven, "greedy", graph, 8, torch.device("cpu"))
    scenes = unproven.scenes()
    bounds = unproven.objective.numpy().copy()
    bounds[3] = whole_lp(scenes[3])
    assert bounds[3] >= unproven.objective[3] - 1e-9  # the LP is at or above the optimum (the label here)
    model_rewards = np.array([reward(s, a) for s, a in zip(scenes, evaluation.assignments)])
    by_hand = np.mean((bounds - model_rewards) / np.abs(bounds))
    assert rows[0]["bound_gap"] == pytest.approx(by_hand, abs=1e-6)  # the bound: the whole LP, to its rounding
    milp = rows[-1]
    assert milp["method"] == "milp" and milp["bound_gap"] == pytest.approx(
        (bounds[3] - float(unproven.objective[3])) / abs(bounds[3]) / len(scenes), abs=1e-6
    )
    assert "bound: certified LP on 1/1 scenes without a proven optimum" in milp["note"]
    assert all(row["bound_gap"] >= row["optimality_gap"] - 1e-6 for row in rows)  # the bound is above the reference
