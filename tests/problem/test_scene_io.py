import json
import re
from pathlib import Path

import numpy as np
import pytest

from uavgnn.problem.scene_io import SceneFileError, load_scene, save_scene, scene_to_dict


@pytest.mark.parametrize("suffix", [".json", ".npz"])
def test_round_trip(hand_scene, tmp_path, suffix) -> None:
    path = tmp_path / f"scene{suffix}"
    save_scene(path, hand_scene, np.array([0, 1, 1, -1]))
    scene, assignment = load_scene(path)
    for field in ("uav_pos", "uav_range", "target_pos", "need", "value"):
        np.testing.assert_array_equal(getattr(scene, field), getattr(hand_scene, field))
    assert scene.lam == hand_scene.lam
    np.testing.assert_array_equal(assignment, [0, 1, 1, -1])


def test_assignment_is_optional(hand_scene, tmp_path) -> None:
    save_scene(tmp_path / "s.json", hand_scene)
    assert load_scene(tmp_path / "s.json")[1] is None


def write(tmp_path, raw) -> str:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    return str(path)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r.pop("uav_range"), "missing field 'uav_range'"),
        (lambda r: r.update(uav_position=[[0, 0, 1]] * 4), "field 'uav_position' has shape (4, 3)"),
        (
            lambda r: r.update(uav_range=[5.0, -1.0, 5.0, 1.0]),
            "field 'uav_range' value -1.0 at index 1 violates 'range > 0'",
        ),
        (lambda r: r.update(target_need=[0, 2]), "field 'target_need' value 0 at index 0 violates 'need >= 1'"),
        (lambda r: r.update(target_need=[1.5, 2]), "field 'target_need' must hold integers, got 1.5"),
        (lambda r: r.update(target_value=[2.0, "NaN"]), "field 'target_value' is not numeric"),
        (lambda r: r.update(uav_range=[5.0, float("inf"), 5.0, 1.0]), "field 'uav_range' has non-finite value inf"),
        (lambda r: r.update(uav_position=[], uav_range=[]), "field 'uav_position' has shape (0,)"),
        (lambda r: r.update(target_value="abc"), "field 'target_value' is not numeric: 'abc'"),
        (lambda r: r.update(target_need=[1]), "field 'target_need' has 1 entries, expected 2 (one per target)"),
        (lambda r: r.update(lam=-0.1), "field 'lam' value -0.1 at index 0 violates 'lam >= 0'"),
        (
            lambda r: r.update(assignment=[0, 1, 5, -1]),
            "field 'assignment' value 5 at index 2 violates '-1 <= assignment < 2'",
        ),
    ],
)
def test_validation_names_field_and_value(hand_scene, tmp_path, change, message) -> None:
    raw = scene_to_dict(hand_scene)
    change(raw)
    with pytest.raises(SceneFileError) as err:
        load_scene(write(tmp_path, raw))
    assert message in str(err.value)


def test_zero_uavs_named(hand_scene, tmp_path) -> None:
    raw = scene_to_dict(hand_scene)
    raw.update(uav_position=np.zeros((0, 2)).tolist(), uav_range=[])
    # json turns an empty (0, 2) array into [], so build the NPZ form where the shape survives
    path = tmp_path / "empty.npz"
    np.savez(
        path,
        uav_position=np.zeros((0, 2)),
        uav_range=np.zeros(0),
        target_position=hand_scene.target_pos,
        target_need=hand_scene.need,
        target_value=hand_scene.value,
        lam=0.5,
    )
    with pytest.raises(SceneFileError, match=r"'uav_position' is empty \(N = 0\)"):
        load_scene(path)


def test_nan_in_npz_named(hand_scene, tmp_path) -> None:
    path = tmp_path / "nan.npz"
    pos = hand_scene.target_pos.copy()
    pos[1, 0] = np.nan
    np.savez(
        path,
        uav_position=hand_scene.uav_pos,
        uav_range=hand_scene.uav_range,
        target_position=pos,
        target_need=hand_scene.need,
        target_value=hand_scene.value,
        lam=0.5,
    )
    with pytest.raises(SceneFileError, match=r"'target_position' has non-finite value nan at index \(1, 0\)"):
        load_scene(path)


def test_unreadable_files_named(tmp_path) -> None:
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(SceneFileError, match="not valid JSON"):
        load_scene(tmp_path / "x.json")
    (tmp_path / "x.csv").write_text("")
    with pytest.raises(SceneFileError, match="unknown scene file type '.csv'"):
        load_scene(tmp_path / "x.csv")
    with pytest.raises(SceneFileError, match="no such scene file"):
        load_scene(tmp_path / "missing.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(SceneFileError, match="expected an object"):
        load_scene(tmp_path / "list.json")


def valid_scene() -> dict:
    return {
        "uav_position": [[0, 0], [3, 0], [0, 4]],
        "uav_range": [5.0, 5.0, 5.0],
        "target_position": [[3, 4], [1, 1]],
        "target_need": [2, 1],
        "target_value": [5.0, 1.0],
        "lam": 0.1,
    }


FIELD_MUTATIONS = {  # each makes any field invalid, whatever its shape
    "deleted": None,
    "text": "abc",
    "boolean": True,
    "nested too deep": [[[1.0]]],
    "empty object": {},
    "nan": float("nan"),
    "negative infinity": float("-inf"),
    "beyond int64": 2**63,
    "overflowing": 1e308,
    "ragged": [[1, 2], [3]],
    "beyond every integer type": 10**400,
}


def malformed_files(directory: Path) -> list[tuple[Path, str]]:
    """(file, text its error must contain): every field x every mutation, plus damaged bytes of every kind."""
    files = []
    for field in valid_scene():
        for name, value in FIELD_MUTATIONS.items():
            raw = valid_scene()
            if name == "deleted":
                del raw[field]
            else:
                raw[field] = value
            path = directory / f"{field}-{name.replace(' ', '_')}.json"
            path.write_text(
                json.dumps(raw)
                if name != "beyond every integer type"
                else json.dumps(raw).replace('"__BIG__"', str(value))
            )
            if name == "beyond every integer type":
                path.write_text(json.dumps({**raw, field: "__BIG__"}).replace('"__BIG__"', str(value)))
            files.append((path, f"'{field}'"))
    text = json.dumps(valid_scene())
    for cut in (1, 7, len(text) // 3, len(text) // 2, len(text) - 1):
        (directory / f"cut{cut}.json").write_text(text[:cut])
        files.append((directory / f"cut{cut}.json", "not valid JSON"))
    rng = np.random.default_rng(0)
    for i in range(4):
        (directory / f"noise{i}.json").write_bytes(rng.integers(0, 256, 200, dtype=np.uint8).tobytes())
        files.append((directory / f"noise{i}.json", "not valid JSON"))
        (directory / f"noise{i}.npz").write_bytes(rng.integers(0, 256, 200, dtype=np.uint8).tobytes())
        files.append((directory / f"noise{i}.npz", "not a readable NPZ archive"))
    (directory / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    files.append((directory / "deep.json", "nested too deeply"))
    good = directory / "good.npz"
    np.savez(good, **{k: np.asarray(v) for k, v in valid_scene().items()})
    for cut in (10, 100, good.stat().st_size // 2, good.stat().st_size - 10):
        (directory / f"cut{cut}.npz").write_bytes(good.read_bytes()[:cut])
        files.append((directory / f"cut{cut}.npz", "NPZ archive"))
    np.save(directory / "array.npy", np.zeros((3, 2)))
    (directory / "array.npy").rename(directory / "array.npz")
    files.append((directory / "array.npz", "not an NPZ archive"))
    (directory / "folder.json").mkdir()
    files.append((directory / "folder.json", "not a regular file"))
    (directory / "empty.json").write_text("")
    (directory / "empty.npz").write_bytes(b"")
    files += [(directory / "empty.json", "not valid JSON"), (directory / "empty.npz", "not a readable NPZ")]
    np.savez(
        directory / "objects.npz",
        **{**{k: np.asarray(v) for k, v in valid_scene().items()}, "lam": np.array([{"a": 1}], dtype=object)},
    )
    files.append((directory / "objects.npz", "NPZ"))
    return files


def test_every_malformed_scene_file_is_a_one_line_error_naming_it(tmp_path) -> None:
    files = malformed_files(tmp_path)
    assert len(files) >= 50
    for path, expected in files:
        with pytest.raises(SceneFileError) as err:
            load_scene(path)
        message = str(err.value)
        assert message.startswith(str(path)) and "\n" not in message and expected in message, (path, message)


def test_magnitudes_beyond_the_documented_bounds_are_named(tmp_path) -> None:
    for field, value, shown in (
        ("uav_position", [[1e308, 0], [0, 0], [0, 0]], "1e+308"),
        ("target_need", [2**63, 1], "9.22337e+18"),
        ("lam", 1e7, "1e+07"),
    ):
        path = tmp_path / f"{field}.json"
        path.write_text(json.dumps({**valid_scene(), field: value}))
        with pytest.raises(
            SceneFileError, match=re.escape(f"field '{field}' value {shown}") + ".*beyond the supported"
        ):
            load_scene(path)
