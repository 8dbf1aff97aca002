import dataclasses
import json
import logging
import subprocess
import sys
import textwrap

import pytest
import torch

from uavgnn.config.settings import split_settings
from uavgnn.data.cache import (
    BuildSettings,
    SplitSpec,
    cache_entries,
    clear_cache,
    foreign_entries,
    load_or_build,
    verify,
)
from uavgnn.problem.scenes import SceneDistribution

SPEC = SplitSpec("train", 6, 12, 7)
DIST = SceneDistribution()
SETTINGS = BuildSettings(k_max=8, uav_neighbours=3, label_time_limit=5.0)


def build(tmp_path, caplog, spec=SPEC, dist=DIST, settings=SETTINGS, workers=1):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="uavgnn.data.cache"):
        store = load_or_build(spec, dist, settings, tmp_path / "cache", workers=workers)
    hit = any("cache hit" in r.message for r in caplog.records)
    return store, hit


def same(a, b) -> bool:
    return all(torch.equal(a.tensors[k], b.tensors[k]) for k in a.tensors) and torch.equal(a.objective, b.objective)


def test_hit_when_nothing_changed_and_workers_do_not_matter(tmp_path, caplog) -> None:
    first, hit = build(tmp_path, caplog)
    assert not hit
    again, hit = build(tmp_path, caplog, workers=2)  # workers change nothing in the content
    assert hit and same(first, again)


@pytest.mark.parametrize(
    "change",
    [
        dict(spec=dataclasses.replace(SPEC, n_uav=7)),
        dict(spec=dataclasses.replace(SPEC, count=13)),
        dict(spec=dataclasses.replace(SPEC, seed=8)),
        dict(spec=dataclasses.replace(SPEC, split="val")),
        dict(settings=dataclasses.replace(SETTINGS, k_max=9)),
        dict(settings=dataclasses.replace(SETTINGS, uav_neighbours=4)),
        dict(settings=dataclasses.replace(SETTINGS, label_time_limit=6.0)),
        *[
            dict(dist=dataclasses.replace(DIST, **{f.name: v}))
            for f, v in zip(
                dataclasses.fields(SceneDistribution),
                ["clustered", 1.5, 0.6, 2, 4, 1.5, 2.5, 2.0, 6.0, 0.2, 3, 1.5, 3.0],
            )
        ],
    ],
)
def test_every_content_setting_misses(tmp_path, caplog, change) -> None:
    build(tmp_path, caplog)
    _, hit = build(tmp_path, caplog, **change)
    assert not hit


def test_feature_set_and_format_version_are_in_the_key(monkeypatch, tmp_path, caplog) -> None:
    import uavgnn.data.cache as cache

    build(tmp_path, caplog)
    monkeypatch.setattr(cache, "FEATURE_SET", "other")
    assert not build(tmp_path, caplog)[1]
    monkeypatch.setattr(cache, "FORMAT_VERSION", 99)
    assert not build(tmp_path, caplog)[1]


@pytest.mark.parametrize("damage", ["truncate", "flip", "manifest"])
def test_corrupt_file_is_rebuilt_with_a_warning(tmp_path, caplog, damage) -> None:
    clean, _ = build(tmp_path, caplog)
    directory = next((tmp_path / "cache").glob("train-*/"))
    graphs = directory / "graphs.pt"
    raw = bytearray(graphs.read_bytes())
    if damage == "truncate":
        graphs.write_bytes(raw[: len(raw) // 2])
    elif damage == "flip":
        raw[len(raw) // 2] ^= 0xFF
        graphs.write_bytes(raw)
    else:
        (directory / "manifest.json").write_text("{broken")
    assert verify(directory) is not None
    with pytest.warns(RuntimeWarning, match="rebuilding"):
        rebuilt, hit = build(tmp_path, caplog)
    assert not hit and same(clean, rebuilt) and verify(directory) is None


@pytest.mark.slow
def test_two_processes_build_once(tmp_path) -> None:
    script = textwrap.dedent(f"""
        import json, logging, sys
        from uavgnn.data.cache import BuildSettings, SplitSpec, load_or_build
        from uavgnn.problem.scenes import SceneDistribution
        records = []
        handler = logging.Handler(); handler.emit = records.append
        logging.getLogger("uavgnn.data.cache").addHandler(handler)
        logging.getLogger("uavgnn.data.cache").setLevel(logging.INFO)
        spec = SplitSpec("train", 10, 150, 3)
        store = load_or_build(spec, SceneDistribution(), BuildSettings(), {str(tmp_path / "c")!r})
        built = any("cache miss" in r.getMessage() for r in records)
        x_sum = float(store.tensors["x"].sum())
        print(json.dumps({{"built": built, "objective": store.objective.tolist(), "x_sum": x_sum}}))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
    assert sorted(o["built"] for o in outs) == [False, True]
    assert outs[0]["objective"] == outs[1]["objective"] and outs[0]["x_sum"] == outs[1]["x_sum"]


def test_splits_have_disjoint_seeds() -> None:
    from uavgnn.config.schemas import Config
    from uavgnn.data.splits import split_spec

    cfg = Config()
    seeds = {
        split: {split_spec(split_settings(cfg), split, n).seed for n in (4, 8, 12, 16, 256, 16384)}
        for split in ("train", "val", "test")
    }
    assert (
        not (seeds["train"] & seeds["val"])
        and not (seeds["train"] & seeds["test"])
        and not (seeds["val"] & seeds["test"])
    )


def test_labels_from_worker_processes_equal_labels_solved_in_process() -> None:
    from uavgnn.data.labels import INLINE_BELOW, solve_labels
    from uavgnn.problem.generator import generate_scenes

    scenes = generate_scenes(DIST, 6, INLINE_BELOW + 6, seed=11)  # enough to use the worker pool
    pooled, inline = solve_labels(scenes, 5.0, workers=2), solve_labels(scenes, 5.0, workers=1)
    assert [r.objective for r in pooled] == [r.objective for r in inline]
    assert all((a.assignment == b.assignment).all() for a, b in zip(pooled, inline))


def test_an_interrupt_while_the_pool_starts_is_the_error_the_user_sees(monkeypatch) -> None:
    """A SIGTERM whose handler raises inside the first submit, while the pool's manager thread starts (the window
    that CI once hit: the pool's shutdown then joined a thread never started, and its RuntimeError replaced the
    interrupt, exit 1 instead of 143): the interrupt comes out and no worker is left."""
    import concurrent.futures.process as pool_module
    import multiprocessing as mp

    from uavgnn.data.labels import INLINE_BELOW, solve_labels
    from uavgnn.infrastructure.errors import Interrupted
    from uavgnn.problem.generator import generate_scenes

    def signalled(self) -> None:
        raise Interrupted("interrupted by SIGTERM", 143)  # what the stop handler raises, inside Thread.start

    monkeypatch.setattr(pool_module._ExecutorManagerThread, "start", signalled)
    with pytest.raises(Interrupted):
        solve_labels(generate_scenes(DIST, 6, INLINE_BELOW, seed=12), 5.0, workers=2)
    assert not mp.active_children()


@pytest.mark.parametrize(
    "manifest, reason",
    [
        ([], "manifest of the wrong shape"),
        ({"files": []}, "manifest of the wrong shape"),
        ({"files": {"graphs.pt": {"sha256": "00"}}}, "lacks the size and checksum"),
        ({"files": {"graphs.pt": {"bytes": "12", "sha256": "00"}}}, "lacks the size and checksum"),
        ("not json", "unreadable manifest"),
    ],
)
def test_a_manifest_of_the_wrong_shape_means_damaged_and_rebuild(tmp_path, manifest, reason) -> None:
    cache = tmp_path / "cache"
    first = load_or_build(SPEC, SceneDistribution(), SETTINGS, cache, workers=1)
    (directory,) = [p for p in cache.iterdir() if p.is_dir()]
    (directory / "manifest.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    assert reason in verify(directory) and reason in cache_entries(cache)[0]["problem"]
    with pytest.warns(RuntimeWarning, match=reason):
        again = load_or_build(SPEC, SceneDistribution(), SETTINGS, cache, workers=1)
    assert torch.equal(again.objective, first.objective) and verify(directory) is None


def test_cache_verify_lists_only_uavgnn_caches(tmp_path) -> None:
    """A foreign directory is not a damaged cache (``verify`` used to fail on it): it is named as left alone."""
    root = tmp_path / "cache"
    load_or_build(SPEC, SceneDistribution(), SETTINGS, root, workers=1)
    (root / "photos").mkdir()
    assert [row["problem"] for row in cache_entries(root)] == [None] and foreign_entries(root) == ["photos"]
    assert clear_cache(root) == 1 and [p.name for p in root.iterdir()] == ["photos"]
    assert cache_entries(tmp_path / "missing") == [] and clear_cache(tmp_path / "missing") == 0
