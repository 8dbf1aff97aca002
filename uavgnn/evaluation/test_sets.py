"""The test sets of ``mode=eval``, scored so as to respect the user's time.

Each distinct set is scored once, however many names it has (the trained task's own test set is also a scale's).
Before any of them, a probe scores up to ``PROBE_SCENES`` fresh scenes like each set's (an eighth of a small set:
it stays a small share of the work) with every method (their MILP labels included) and the duration is estimated
from it: per set, its scenes x the probe's time per scene to score and its batches x the probe's time per batch
(what a decode costs however few scenes it holds: the staged decision's stages), plus, where the set is not in
the cache yet, its time per scene to label over the processes that will label it. After each set: the time so far
and what is left, by the estimate corrected with the time measured. Each set's rows are kept in the run directory
as it finishes (``uavgnn.runs.partial``): re-issued after a stop, the evaluation scores (and estimates) only the
sets left. A set that gives the same scenes as another
(a shift that degenerates at this size, e.g. clusters larger than the targets) gets a warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from uavgnn.data.cache import BuildSettings, label_and_build
from uavgnn.data.labels import INLINE_BELOW
from uavgnn.data.splits import SplitSettings, is_cached, load_split
from uavgnn.data.store import GraphStore
from uavgnn.evaluation.assignments import BATCH_SCENES
from uavgnn.evaluation.methods import Controls, compare_on_split
from uavgnn.infrastructure.console import Countdown, count, echo
from uavgnn.infrastructure.memory import check_fits
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.graphs import GraphSettings
from uavgnn.problem.scene_folder import files_fingerprint, load_scenes, split_files
from uavgnn.problem.scenes import Scene, SceneDistribution
from uavgnn.runs.partial import PartialResults

log = logging.getLogger(__name__)
PROBE_SCENES = 4  # scenes like a set's the estimate is measured on (at most)
LABEL_BYTES_PER_UAV = 16 * 2**10  # the MILP's and the graph's peak per UAV of a scene (measured: 14 KB at 65,536)
PROBE_SEED = 4_000_000  # their generator seeds (+ UAVs): apart from every split's


@dataclass(frozen=True)
class TestSetSettings:
    """How ``mode=eval`` scores its test sets (the ``eval`` group, the run's splits and precision)."""

    splits: SplitSettings  # the run's splits: each test set takes its task, its size and the model's graphs
    test_scenes: int = 256  # scenes of a set at most (data.test_scenes) ...
    max_total_uavs: int = 65_536  # ... and UAVs of all its scenes together at most
    milp_time_limit: float = 60.0  # seconds per scene for the labels
    label_workers: int = 1
    decoder: str = "greedy"
    samples: int = 16
    repair: bool = False
    controls: Controls = Controls()
    dtype: torch.dtype | None = None  # the forward's autocast dtype (None: full precision)

    def scenes_at(self, n_uav: int) -> int:
        """A generated set's scenes at ``n_uav`` UAVs."""
        return max(1, min(self.test_scenes, self.max_total_uavs // n_uav))


class SetScorer:
    """Scores (label, task, UAVs) test sets: each distinct one once, its duration said first."""

    def __init__(self, settings: TestSetSettings, model: nn.Module, graph: GraphSettings, device: torch.device) -> None:
        self.settings, self.model, self.graph, self.device = settings, model, graph, device
        self.estimated_s = self.took_s = 0.0

    def run(self, sets: list[tuple[str, dict[str, Any], int]], partial: PartialResults) -> list[list[dict]]:
        """The rows of every set, in order. Each set's rows are kept in ``partial`` as it finishes; a set already
        finished there (an evaluation stopped and re-issued) is read back, not scored again."""
        keys = [self.set_key(task, n_uav) for _, task, n_uav in sets]
        distinct: dict[str, tuple[str, dict[str, Any], int]] = {}
        for key, item in zip(keys, sets):
            distinct.setdefault(key, item)  # named by its first name
        done: dict[str, dict[str, Any]] = {}
        for key in distinct:
            kept = partial.get(key)
            if kept is not None:
                done[key] = kept
        todo = [key for key in distinct if key not in done]
        start = time.perf_counter()
        countdown = Countdown(dict(zip(todo, self.estimate([distinct[key] for key in todo]))))
        self.estimated_s = countdown.total_s
        kept = f"; {len(done)} finished before, kept" if done else ""
        echo(
            f"mode=eval: {count(len(distinct), 'test set')} to score ({len(sets) - len(distinct)} repeated under "
            f"another name, scored once{kept}): about {self.estimated_s:.0f} s (measured on up to {PROBE_SCENES} "
            f"probe scenes like each set's in {time.perf_counter() - start:.0f} s)"
        )
        countdown.start = time.perf_counter()
        for number, key in enumerate(distinct, 1):
            if key not in countdown.expected:
                continue
            label, task, n_uav = distinct[key]
            size = f"task.folder={task['folder']}" if task.get("folder") else f"{n_uav} UAVs"
            echo(
                f"  set {number}/{len(distinct)}: {label}, {size}, "
                f"{count(self.scene_count(task, n_uav), 'scene')}, about {countdown.expected[key]:.0f} s"
            )
            rows, scenes = self.score(task, n_uav)
            value = {"rows": rows, "scenes": scenes}
            done[key] = partial.put(key, value)
            echo(countdown.finish(key))
        self.took_s = countdown.elapsed_s
        echo(f"mode=eval: scored in {self.took_s:.0f} s (estimated {self.estimated_s:.0f} s)")
        seen: dict[str, str] = {}
        for key, (label, _, n_uav) in distinct.items():
            scenes = done[key]["scenes"]
            if scenes in seen:
                log.warning(
                    "eval: %s gives the same %d-UAV scenes as %s: at this size the shift changes nothing "
                    "(one of them says nothing more)",
                    label,
                    n_uav,
                    seen[scenes],
                )
            seen.setdefault(scenes, label)
        return [done[key]["rows"] for key in keys]

    def splits(self, task: dict[str, Any]) -> SplitSettings:
        """The splits whose test split is ``task``'s, labelled with the eval's MILP time limit, its graphs built as
        the model reads them (its candidates and UAV neighbours, not this run's ``data``)."""
        build = BuildSettings(self.graph.k_max, self.graph.uav_neighbours, self.settings.milp_time_limit)
        dist = SceneDistribution(**{f.name: task[f.name] for f in fields(SceneDistribution) if f.name in task})
        return replace(self.settings.splits, dist=dist, build=build, folder=task.get("folder"))

    def scene_count(self, task: dict[str, Any], n_uav: int) -> int:
        return len(split_files(task["folder"], "test")) if task.get("folder") else self.settings.scenes_at(n_uav)

    def set_key(self, task: dict[str, Any], n_uav: int) -> str:
        """What makes a test set: the task's fields (its name aside), the size and the number of scenes; a
        folder's, its files' contents too (an edited folder is another set)."""
        fields = {k: v for k, v in task.items() if k != "name"}
        if task.get("folder"):
            fields["files"] = files_fingerprint(split_files(task["folder"], "test"))
        return json.dumps([fields, n_uav, self.scene_count(task, n_uav)], sort_keys=True, default=str)

    def estimate(self, sets: list[tuple[str, dict[str, Any], int]]) -> list[float]:
        """Seconds each set is expected to take, from a probe of its own task and size."""
        for _, task, n_uav in sets:  # before any probe (it labels too): a scale that cannot fit is refused at once
            if not task.get("folder"):
                check_fits(
                    f"eval.scales: labelling a test scene of {n_uav:,} UAVs with the MILP (and building its graph)",
                    n_uav * LABEL_BYTES_PER_UAV,
                    "lower eval.scales (the MILP labels every test scene; mode=solve solver=model scores one scene "
                    "of any size, in tiles)",
                )
        workers = max(1, self.settings.label_workers)
        seconds = []
        for i, (_, task, n_uav) in enumerate(sets):
            label_s, batch_s, score_s = self.probe(task, n_uav, warm_up=i == 0)
            scenes = self.scene_count(task, n_uav)
            cached = is_cached(self.splits(task), "test", n_uav=n_uav, count=scenes)
            labelling = 1 if scenes < INLINE_BELOW else min(workers, scenes)  # processes that will label it
            seconds.append(
                scenes * score_s
                + math.ceil(scenes / BATCH_SCENES) * batch_s
                + (0.0 if cached else scenes * label_s / labelling)
            )
        return seconds

    def probe(self, task: dict[str, Any], n_uav: int, warm_up: bool) -> tuple[float, float, float]:
        """Seconds per scene to label (the MILP's own time, and the graph's), per batch and per scene to score
        scenes like the set's, over up to ``PROBE_SCENES`` of them: the first scored alone, once to warm up at
        this size and once timed, then all together; the difference is what the others add. One probe scene (a
        set of large scenes): all of it per scene, warmed up only with ``warm_up`` (the first call pays one-off
        costs). The MILP's times are heavy-tailed (their median is 1.2x below their mean at 16 UAVs, 2-4x at
        256): the median would say too little, one slow scene among a few far too much, so the slowest counts as
        the next slowest."""
        splits = self.splits(task)
        probes = min(PROBE_SCENES, max(1, self.scene_count(task, n_uav) // 8))
        scenes = (
            load_scenes(split_files(task["folder"], "test")[:probes])
            if task.get("folder")
            else generate_scenes(splits.dist, n_uav, probes, PROBE_SEED + n_uav)
        )
        parts = [label_and_build(part, 0.0, "probe", splits.build, 1) for part in (scenes[:1], scenes[1:]) if part]
        first, store = parts[0][0], GraphStore.concat([store for store, _ in parts])
        if warm_up or len(store) > 1:
            self.compare(first, n_uav)
        one_s = self.timed(first, n_uav)
        score_s = max(self.timed(store, n_uav) - one_s, 0.0) / (len(store) - 1) if len(store) > 1 else one_s
        label_s = np.sort(store.solve_time.numpy())
        if len(label_s) > 2:
            label_s[-1] = label_s[-2]
        graphs_s = sum(info["timings"]["graphs_s"] for _, info in parts)
        return float(label_s.mean()) + graphs_s / len(store), max(one_s - score_s, 0.0), score_s

    def timed(self, store: Any, n_uav: int) -> float:
        """Seconds to score ``store`` (every method)."""
        start = time.perf_counter()
        self.compare(store, n_uav)
        return time.perf_counter() - start

    def compare(self, store: Any, n_uav: int) -> list[dict]:
        s = self.settings
        return compare_on_split(
            self.model,
            store,
            s.decoder,
            self.graph,
            self.graph.k(n_uav),
            self.device,
            s.dtype,
            s.samples,
            s.repair,
            s.controls,
        )[0]

    def score(self, task: dict[str, Any], n_uav: int) -> tuple[list[dict], str]:
        """Every method on the fixed-seed test split of ``task`` at ``n_uav`` UAVs (built and labelled once,
        cached), and a fingerprint of its scenes."""
        store = load_split(self.splits(task), "test", n_uav=n_uav, count=self.scene_count(task, n_uav))
        rows = self.compare(store, n_uav)
        log.info("eval %s %d UAVs: model gap %.4f", task["name"], n_uav, rows[0]["optimality_gap"])
        if rows[0]["reference_optimal"] != f"{len(store)}/{len(store)}":
            log.warning(
                "eval %s %d UAVs: the MILP proved the optimum of only %s scenes (eval.milp_time_limit=%gs): "
                "on the others the gaps are against the best assignment found",
                task["name"],
                n_uav,
                rows[0]["reference_optimal"],
                self.settings.milp_time_limit,
            )
        shown = int(store.tensors["n_uav"].max()) if task.get("folder") else n_uav  # a folder's: its largest
        return [{"n_uav": shown, "scenes": len(store), **row} for row in rows], _fingerprint(store.scenes())


def _fingerprint(scenes: list[Scene]) -> str:
    digest = hashlib.sha256()
    for scene in scenes:
        for array in (scene.uav_pos, scene.uav_range, scene.target_pos, scene.need, scene.value):
            digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()
