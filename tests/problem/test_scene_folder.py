"""Your own scene files as train/val/test splits (``task=folder``): how a folder splits, a training run and an
evaluation on them, the cached split holding exactly the files' scenes with their MILP labels, and one clear
line for each wrong use."""

from __future__ import annotations

import hashlib
import json
import re
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from conftest import compose, run_cli

from uavgnn.algorithms.registry import check_config
from uavgnn.config.settings import split_settings
from uavgnn.data.splits import load_split
from uavgnn.infrastructure.errors import ConfigError, SceneFileError
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.scene_folder import MAX_SCENE_FILE_BYTES, files_fingerprint, split_files
from uavgnn.problem.scene_io import load_scene, save_scene
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.solvers.milp import solve_milp


def write_scenes(folder: Path, sizes: list[int], seed: int) -> None:
    """One scene file per size, alternating JSON and NPZ."""
    folder.mkdir(parents=True)
    for i, n_uav in enumerate(sizes):
        (scene,) = generate_scenes(SceneDistribution(), n_uav, 1, seed + i)
        save_scene(folder / f"scene{i:03d}.{'json' if i % 2 else 'npz'}", scene)


def test_a_flat_folder_splits_a_tenth_to_val_and_test_the_same_way_every_time(tmp_path) -> None:
    write_scenes(tmp_path / "scenes", [5] * 23, seed=0)
    (tmp_path / "scenes" / "notes.txt").write_text("not a scene")
    splits = {split: split_files(tmp_path / "scenes", split) for split in ("train", "val", "test")}
    assert [len(splits[s]) for s in ("train", "val", "test")] == [19, 2, 2]
    names = [p.name for files in splits.values() for p in files]
    assert sorted(names) == [f"scene{i:03d}.{'json' if i % 2 else 'npz'}" for i in range(23)]  # each file once
    assert splits == {split: split_files(tmp_path / "scenes", split) for split in splits}


def test_subfolders_are_the_split_and_a_missing_one_is_one_line(tmp_path) -> None:
    for split, count in (("train", 4), ("val", 2), ("test", 3)):
        write_scenes(tmp_path / "mine" / split, [5] * count, seed=10 * count)
    assert [len(split_files(tmp_path / "mine", s)) for s in ("train", "val", "test")] == [4, 2, 3]
    for path in (tmp_path / "mine" / "val").iterdir():
        path.unlink()
    with pytest.raises(ConfigError, match=r"has train/, val/, test/ but no scene files in val/"):
        split_files(tmp_path / "mine", "train")
    with pytest.raises(ConfigError, match="no such folder"):
        split_files(tmp_path / "nowhere", "train")
    write_scenes(tmp_path / "two", [5, 5], seed=0)
    with pytest.raises(ConfigError, match="2 scene files .* needs at least 3"):
        split_files(tmp_path / "two", "test")


def test_a_folder_of_scenes_of_several_sizes_trains_and_evaluates(tmp_path) -> None:
    folder = tmp_path / "scenes"
    sizes = {"train": [5, 6, 7] * 8, "val": [5, 6, 7] * 2, "test": [5, 6, 7, 6]}
    for offset, (split, split_sizes) in enumerate(sizes.items()):
        write_scenes(folder / split, split_sizes, seed=1000 * offset)
    cache, common = tmp_path / "cache", ["task=folder", f"task.folder={folder}", "logger=jsonl"]
    too_many = run_cli(
        "experiment=debug",
        "data.n_uav=6",
        "hardware.batch_size=32",
        *common,
        f"data.cache_dir={cache}",
        f"hydra.run.dir={tmp_path / 'refused'}",
        cwd=tmp_path,
        check=False,
    )  # 24 scenes
    assert f"task.folder={folder}: its train split has 24 scenes, fewer than hardware.batch_size=32" in too_many.stderr
    assert too_many.returncode == 2 and not (tmp_path / "refused").exists()  # refused before it wrote anything
    train = run_cli(
        "experiment=debug",
        "model=tiny",
        "data.n_uav=6",
        "hardware.batch_size=8",
        *common,
        f"data.cache_dir={cache}",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert f"Test set: 4 scenes of 5-7 UAVs (task.folder={folder})" in train.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] > 0 and np.isfinite(summary["best_val_optimality_gap"])
    assert sorted(d.name.split("-")[:2] for d in cache.iterdir() if d.is_dir()) == [
        ["test", "folder"],
        ["train", "folder"],
        ["val", "folder"],
    ]

    cfg = compose("experiment=debug", "data.n_uav=6", *common, f"data.cache_dir={cache}")
    store = load_split(split_settings(cfg), "train")  # the cached split the run trained on (a cache hit)
    files = sorted((folder / "train").iterdir())
    assert len(store) == 24 and store.tensors["n_uav"].tolist() == sizes["train"]
    for i in (0, 1, 2):  # each scene as its file holds it, labelled by the MILP solved here independently
        scene, _ = load_scene(files[i])
        np.testing.assert_allclose(store.scene(i).target_pos, scene.target_pos)
        assert float(store.objective[i]) == pytest.approx(solve_milp(scene).objective, rel=1e-6, abs=1e-9)

    run_cli(
        "mode=eval",
        f"ckpt={tmp_path / 'run' / 'best.pt'}",
        *common,
        "eval.shift_sets=[]",
        f"data.cache_dir={cache}",
        f"hydra.run.dir={tmp_path / 'eval'}",
        cwd=tmp_path,
    )
    rows = json.loads((tmp_path / "eval" / "transfer.json").read_text())["rows"]
    assert {row["positions"] for row in rows} == {"folder"} and {row["scenes"] for row in rows} == {4}
    assert {row["n_uav"] for row in rows} == {7}  # the folder's largest scene, not the training size (6)
    assert rows[0]["method"].startswith("model") and np.isfinite(rows[0]["optimality_gap"])


@pytest.mark.parametrize(
    "overrides, says",
    [
        (["task=folder"], "task=folder needs task.folder=PATH"),
        (["task=folder", "task.folder=TMP", "curriculum=conservative"], "task=folder with curriculum=conservative"),
        (
            ["task=folder", "task.folder=TMP", "data.source=generated", "algorithm=reinforce"],
            "data.source=generated with task=folder",
        ),
        (["task=folder", "task.folder=TMP", "mode=solve"], "mode=solve with task=folder: it solves one scene"),
        (
            ["task=folder", "task.folder=TMP", "algorithm=masac", "model=mlp"],
            "task=folder with algorithm=masac: its scenes come from the environment",
        ),
    ],
)
def test_a_wrong_folder_task_is_refused_before_any_work(tmp_path, overrides, says) -> None:
    cfg = compose("experiment=debug", *(o.replace("TMP", str(tmp_path)) for o in overrides))
    with pytest.raises(ConfigError, match=re.escape(says)):
        check_config(cfg)


def test_a_folders_fingerprint_is_unchanged_and_read_as_a_stream(tmp_path) -> None:
    folder = tmp_path / "scenes"
    folder.mkdir()
    (folder / "a.json").write_bytes(b'{"lam": 0.5}')
    (folder / "b.npz").write_bytes(bytes(range(256)) * 3)
    (folder / "c.json").write_bytes(b"")
    files = sorted(folder.iterdir())
    by_hand = hashlib.sha256(b"".join(p.name.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest() for p in files))
    assert files_fingerprint(files) == by_hand.hexdigest()
    assert files_fingerprint(files) == "915aa8dcffb7663670d374612c6650bd08dc225c7f079bc67660b08ebf31e23d"  # as cached

    with (tmp_path / "zeros.npz").open("wb") as f:
        f.truncate(128 * 2**20)  # sparse: no disk
    zeros = hashlib.sha256()
    for _ in range(128):
        zeros.update(bytes(2**20))
    tracemalloc.start()
    try:
        fingerprint = files_fingerprint([tmp_path / "zeros.npz"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert fingerprint == hashlib.sha256(b"zeros.npz\0" + zeros.digest()).hexdigest()
    assert peak < 4 * 2**20  # the 128 MB file is never in memory at once


def test_a_file_over_the_cap_is_refused_before_it_is_read(tmp_path, monkeypatch) -> None:
    write_scenes(tmp_path / "scenes", [5, 5], seed=0)
    huge = tmp_path / "scenes" / "huge.json"
    with huge.open("wb") as f:
        f.truncate(100 * 2**30)  # sparse: costs no disk
    assert huge.stat().st_size > MAX_SCENE_FILE_BYTES
    files = [path for split in ("train", "val", "test") for path in split_files(tmp_path / "scenes", split)]
    assert huge in files
    digested = []  # the files whose bytes were read, in order
    real_digest = hashlib.file_digest

    def digest(fileobj, name):
        digested.append(Path(fileobj.name))
        return real_digest(fileobj, name)

    monkeypatch.setattr(hashlib, "file_digest", digest)
    with pytest.raises(SceneFileError) as caught:
        files_fingerprint(files)
    assert digested == []  # refused on its size before any file was read (hashing the others takes minutes)
    assert str(caught.value) == (
        f"{huge}: 100.0 GB (107,374,182,400 bytes), over the 64.0 GB a scene file can be "
        "(MAX_SCENE_FILE_BYTES): not a scene; take it out of the folder"
    )
    with huge.open("wb") as f:
        f.truncate(60 * 2**30)  # under the cap, but 300 GB to parse: more memory than this machine has
    with pytest.raises(SceneFileError) as caught:
        files_fingerprint(files)
    assert digested == [] and str(caught.value).startswith(f"{huge}: reading this JSON scene file")
