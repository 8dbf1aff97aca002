"""Curriculum over scene size: advance/fallback logic on scripted scores, replay, batch sizes, resume."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT, run_cli

from uavgnn.data.cache import BuildSettings, SplitSpec, load_or_build
from uavgnn.data.stages import CurriculumSampler, stage_batch_size
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.training.curriculum import ADVANCE, FALLBACK, CurriculumState, update_curriculum

CONSERVATIVE = SimpleNamespace(
    stages=[4, 8, 12, 16],
    advance_threshold=0.8,
    consecutive_evaluations=5,
    patience=10,
    performance_threshold=0.6,
    consecutive_failures=3,
    max_fallbacks=2,
    learning_rate_decay=0.5,
)


def run_script(cfg, scores: list[float]) -> tuple[list[int], list[str | None]]:
    state = CurriculumState()
    stages, events = [], []
    for score in scores:
        events.append(update_curriculum(cfg, state, score))
        stages.append(state.stage)
    return stages, events


def test_advances_after_consecutive_passes_or_patience() -> None:
    # stage 0: a failed pass resets the streak, then 5 passes in a row advance
    # stage 1: never reaches 0.8, advances after patience = 10 evaluations
    scores = [0.9, 0.9, 0.7, 0.9, 0.9, 0.9, 0.9, 0.9] + [0.75] * 10 + [0.85] * 5
    stages, events = run_script(CONSERVATIVE, scores)
    assert stages == [0] * 7 + [1] + [1] * 9 + [2] + [2] * 4 + [3]
    assert [i for i, e in enumerate(events) if e == ADVANCE] == [7, 17, 22]


def test_falls_back_after_consecutive_failures_at_most_max_fallbacks() -> None:
    cfg = SimpleNamespace(**{**vars(CONSERVATIVE), "consecutive_evaluations": 1})
    # stage 0 left with 0.9 -> stage 1 fails below 0.6 x 0.9 = 0.54 three times in a row -> back to stage 0;
    # a 0.6 (not a failure) in between resets the count
    scores = [0.9, 0.5, 0.5, 0.6, 0.5, 0.5, 0.5]
    stages, events = run_script(cfg, scores)
    assert stages == [1, 1, 1, 1, 1, 1, 0]
    assert events[-1] == FALLBACK
    state = CurriculumState()
    for score in [0.9] + [0.1] * 3 + [0.9] + [0.1] * 3 + [0.9] + [0.1] * 5:
        update_curriculum(cfg, state, score)
    assert state.fallbacks == 2 and state.stage == 1  # the third fall is not taken: max_fallbacks = 2


def test_by_scale_batch_rule_and_node_budget() -> None:
    assert [stage_batch_size("by_scale", n, 64, 0) for n in (6, 8, 12, 16, 18, 24, 25)] == [
        128,
        128,
        64,
        64,
        32,
        32,
        16,
    ]
    assert stage_batch_size("nodes", 24, 64, 1536) == 64 and stage_batch_size("nodes", 6, 64, 1536) == 256
    assert stage_batch_size("fixed", 6, 48, 1536) == 48
    with pytest.raises(ValueError, match="curriculum.batch_policy: unknown policy 'size'"):
        stage_batch_size("size", 6, 48, 1536)


def test_replay_fraction_over_many_batches(tmp_path) -> None:
    stores = [
        load_or_build(SplitSpec("train", n, 20, 100 + n), SceneDistribution(), BuildSettings(), tmp_path, workers=1)
        for n in (3, 5, 7)
    ]
    sampler = CurriculumSampler(stores, seed=1)
    seen_sizes: list[int] = []
    for step in range(200):
        batch = sampler.batch(step, stage=2, batch_size=32, historical_fraction=0.4)
        seen_sizes += batch.n_uav.tolist()
    sizes = torch.tensor(seen_sizes)
    assert (sizes < 7).float().mean().item() == pytest.approx(round(32 * 0.4) / 32)  # 13 of every 32
    assert {3, 5} <= set(sizes[sizes < 7].tolist())  # drawn from every earlier stage
    first = sampler.batch(0, 1, 16, 0.3)
    again = sampler.batch(0, 1, 16, 0.3)
    assert torch.equal(first.scene_id, again.scene_id)  # a pure function of (seed, step): resumable
    halves = [sampler.batch(5, 2, 32, 0.4, rank=r, world_size=2).scene_id for r in (0, 1)]
    assert sorted(torch.cat(halves).tolist()) == sorted(sampler.batch(5, 2, 32, 0.4).scene_id.tolist())


@pytest.mark.heavy  # 20 s; resume exactness runs by default in test_stop and test_log_window, with -m heavy here too
def test_resumed_run_keeps_its_stage_and_matches_an_uninterrupted_run(tmp_path) -> None:
    args = [
        "experiment=debug",
        "model=tiny",
        "data.n_uav=6",
        "data.train_scenes=32",
        "data.val_scenes=8",
        "data.test_scenes=8",
        "curriculum=aggressive",
        "curriculum.stages=[3,6]",
        "curriculum.replay=[0,0.3]",
        "curriculum.patience=1",
        "train.steps=80",
        "train.eval_every=5",
        "train.ckpt_every=10",
        "train.log_every=5",
        "logger=jsonl",
        f"data.cache_dir={tmp_path / 'cache'}",
        # One thread: a multi-threaded CPU BLAS on a loaded machine may split float32 reductions
        # differently between two runs (seen: 6e-8), and the curriculum's thresholds can amplify such
        # rounding into a different stage schedule. Single-threaded, resumption is bit-exact.
        "hardware.threads=1",
    ]
    run_cli(*args, f"hydra.run.dir={tmp_path / 'straight'}", cwd=tmp_path)
    cmd = [sys.executable, str(ROOT / "run.py"), *args, f"hydra.run.dir={tmp_path / 'killed'}"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last = tmp_path / "killed" / "last.pt"
    deadline = time.time() + 300
    while not last.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    saved = torch.load(last, weights_only=False)["state"]
    assert saved["step"] < 80, "the run finished before it could be interrupted"
    assert saved["curriculum"]["stage"] == 1  # advanced (patience 1) before the first checkpoint
    run_cli(*args, f"hydra.run.dir={tmp_path / 'killed'}", "resume=auto", cwd=tmp_path)
    straight = torch.load(tmp_path / "straight" / "last.pt", weights_only=False)
    resumed = torch.load(last, weights_only=False)
    for name, value in straight["model"].items():
        torch.testing.assert_close(resumed["model"][name], value, rtol=0, atol=0)
    assert resumed["state"]["curriculum"] == straight["state"]["curriculum"]
    rows = [json.loads(line) for line in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    events = [r for r in rows if "event" in r]
    assert events[0] == {**events[0], "step": 5, "event": "advance", "stage": 1, "n_uav": 6}
    assert [r["curriculum/stage"] for r in rows if "curriculum/stage" in r][:2] == [1, 1]
