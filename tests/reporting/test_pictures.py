"""Pictures a paper shows: nothing cut at the figure's edges, no text over other text, captions that
say what is drawn. Measured on the drawn figures (matplotlib's window extents), not looked at."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from uavgnn.algorithms import scene_policy
from uavgnn.problem.scenes import Scene
from uavgnn.reporting.evaluation_pictures import frontier_figure
from uavgnn.reporting.pictures import assignments_figure

METHODS = [
    "model (greedy)",
    "single-stage (greedy)",
    "unbalanced (greedy)",
    "sampled (best of 16)",
    *(f"{rule}-pruned milp (keep {k})" for rule in ("model", "nearest", "value", "relaxation") for k in (1, 2)),
    "milp (0.1 s)",
    "milp (1 s)",
    "milp (10 s)",
    "greedy",
    "lap",
    "mcf",
    "mcf + repair",
    "milp",
]


def overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def inside(box, figure) -> bool:
    return figure.x0 - 1 <= box.x0 and box.x1 <= figure.x1 + 1 and figure.y0 - 1 <= box.y0 and box.y1 <= figure.y1 + 1


def check_layout(fig) -> None:
    """Every legend, title and axes inside the figure; the legends and the figure's title over no axes (with its
    labels) and no axes' title over another's."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    axes = [ax.get_tightbbox(renderer) for ax in fig.axes]
    titles = [ax.title.get_window_extent(renderer) for ax in fig.axes]
    for legend in fig.legends:
        box = legend.get_window_extent(renderer)
        assert inside(box, fig.bbox), (box, fig.bbox)
        assert not any(overlap(box, a) for a in axes)
    if fig._suptitle is not None:
        box = fig._suptitle.get_window_extent(renderer)
        assert inside(box, fig.bbox) and not any(overlap(box, a) for a in axes + titles)
    assert all(inside(a, fig.bbox) for a in axes)
    assert not any(overlap(a, b) for a, b in itertools.combinations(titles, 2))


@pytest.mark.parametrize("scales", [[16], [16, 256, 1024], [16, 256, 1024, 4096, 16384]])
def test_frontier_legend_fits_the_figure(scales) -> None:
    """The legend fits inside the figure at the README's own command (3 scales), and at one scale, where it is
    hardest to fit: cut at both edges, the legend would hide which line is which."""
    rng = np.random.default_rng(0)
    rows = [
        {
            "positions": p,
            "n_uav": n,
            "method": m,
            "optimality_gap": rng.uniform(0, 0.05),
            "time_s": rng.uniform(1e-3, 1),
        }
        | {"scenes": 8}
        for p, n, m in itertools.product(["uniform", "clustered"], scales, METHODS)
    ]
    fig = frontier_figure(rows)
    check_layout(fig)
    assert len(fig.legends) == 1 and len(fig.legends[0].get_texts()) == 14  # each family once
    assert fig.get_size_inches()[0] == pytest.approx(max(7.0, 1.8 * len(scales) + 0.5))  # a paper's 7 inches


class Store:
    """The test split as ``model_vs_milp_picture`` reads it: scenes and their MILP labels."""

    def __init__(self, n: int) -> None:
        rng = np.random.default_rng(1)
        self.scenes = [
            Scene(
                rng.uniform(0, 3, (6, 2)), np.full(6, 9.0), rng.uniform(0, 3, (3, 2)), np.ones(3, int), np.ones(3), 0.1
            )
            for _ in range(n)
        ]
        self.labels = [rng.integers(0, 3, 6) for _ in range(n)]

    def label_assignments(self) -> list[np.ndarray]:
        return self.labels

    def scene(self, i: int) -> Scene:
        return self.scenes[i]


def test_the_test_scene_caption_says_what_is_drawn(monkeypatch, tmp_path) -> None:
    """The caption says which scene is drawn and why, never "the first where they differ" then "0.0% below the
    MILP" (a scene whose assignment differed at the same reward, or by less than 0.05%): the scene of median gap
    among those where the model's reward is below the MILP's, with the gap to 0.01%; else a difference at the same
    reward; else a match. The title sits above the panels' own, the legend below their x labels."""
    drawn = {}
    monkeypatch.setattr(scene_policy, "plot_assignments", lambda scene, panels, path, title: drawn.update(t=title))
    store = Store(6)
    ours = [a.copy() for a in store.labels]
    for i in (1, 2, 4, 5):
        ours[i][0] = (ours[i][0] + 1) % 3
    gaps = np.array([0.0, 0.00004, 0.031, 0.0, 0.012, 0.02])  # scene 1: below, but 0.00% as printed
    scene_policy.model_vs_milp_picture(
        store, SimpleNamespace(metrics={"optimality_gap": gaps}, assignments=ours), "tiny", tmp_path
    )
    median = "test scene 5: the tiny model's reward is 2.00% below the MILP's (the median of its 3 misses in 6 test"
    assert drawn["t"] == median + " scenes)"
    evaluation = SimpleNamespace(metrics={"optimality_gap": np.zeros(6)}, assignments=ours)
    scene_policy.model_vs_milp_picture(store, evaluation, "tiny", tmp_path)
    assert drawn["t"].startswith("test scene 1: the tiny model assigns otherwise than the MILP for the same reward")
    evaluation = SimpleNamespace(metrics={"optimality_gap": np.zeros(6)}, assignments=store.labels)
    scene_policy.model_vs_milp_picture(store, evaluation, "tiny", tmp_path)
    assert drawn["t"] == "test scene 0: the tiny model's assignment is the MILP's on all 6 test scenes"
    long = "test scene 175: the small model's reward is 1.46% below the MILP's (the median of its 62 misses in 256)"
    fig = assignments_figure(store.scene(0), {"tiny model": ours[2], "MILP": store.labels[2]}, long)
    check_layout(fig)
    assert fig.get_size_inches()[0] == pytest.approx(7.0)
