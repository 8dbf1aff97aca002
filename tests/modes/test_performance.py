"""The performance toolkit: naive vs optimized pipeline, layer-wise inference, activation memory,
auto batch size, and the profile / benchmark / info modes run end to end."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch
from conftest import run_cli
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData
from torch_geometric.data import Batch

from uavgnn.algorithms.scene_policy import Budgeted, batch_imitation_loss
from uavgnn.data.cache import BuildSettings, SplitSpec, load_or_build
from uavgnn.data.naive import NaiveSceneDataset
from uavgnn.infrastructure.errors import MemoryBudgetError
from uavgnn.infrastructure.perf import ActivationMeter
from uavgnn.models import TransformerGNN
from uavgnn.models.choices import imitation_loss
from uavgnn.models.policy import policy_log_probs
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.graphs import build_graph, message_edges
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.training.batch_size import find_batch_size, step_memory_mb

TINY = [
    "experiment=debug",
    "model=tiny",
    "data.n_uav=6",
    "data.train_scenes=64",
    "data.val_scenes=8",
    "data.test_scenes=8",
    "hardware.batch_size=16",
    "logger=none",
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return load_or_build(SplitSpec("train", 12, 24, 7), SceneDistribution(), BuildSettings(), cache, workers=1)


def test_naive_pipeline_builds_the_same_graphs_and_logits(store) -> None:
    naive = NaiveSceneDataset(store.scenes(), store.label_assignments())
    ids = list(range(8))
    slow = Batch.from_data_list([naive[i] for i in ids])
    fast = store.gather(torch.tensor(ids))
    for key in ("x", "node_type", "cand_index", "cand_attr", "cand_rank", "uu_index", "uu_attr", "cand_label", "busy"):
        assert torch.allclose(slow[key].float(), fast[key].float(), atol=1e-6), key
    model = TransformerGNN(hidden=32, heads=2, layers=2).eval()
    with torch.no_grad():
        for a, b in zip(policy_log_probs(model, slow, 8), policy_log_probs(model, fast, 8)):
            assert torch.allclose(a.float(), b.float(), atol=1e-6)


def test_layerwise_inference_equals_the_full_forward() -> None:
    graphs = [build_graph(s) for s in generate_scenes(SceneDistribution(), 120, 2, 3)]
    batch = Batch.from_data_list(graphs)
    edge_index, edge_attr, keep, _ = message_edges(batch, 16)
    args = (batch.x, batch.node_type, edge_index, edge_attr, batch.cand_index[:, keep], batch.cand_attr[keep])
    model = TransformerGNN(hidden=32, heads=4, layers=3).eval()
    with torch.no_grad():
        full = model(*args)
    chunked = model.forward_chunked(*args, max_edges=300)  # ~30 node groups per layer, 300-edge candidate blocks
    assert edge_index.shape[1] > 20 * 300
    for a, b in zip(full, chunked):
        assert torch.allclose(a, b, atol=1e-5)


def test_activation_meter_counts_saved_tensors_by_hand() -> None:
    weight = torch.nn.Linear(1, 1)  # parameters are never counted
    a = torch.randn(1000, requires_grad=True)
    with ActivationMeter(weight) as meter:
        a.exp()  # exp saves its float32 output for backward: 4,000 bytes
    assert meter.bytes == 4000


def test_checkpointing_subset_of_layers_keeps_gradients_and_saves_memory(store) -> None:
    batch = store.gather(torch.arange(16))
    grads, memory = [], []
    for layers in ((), (1,), (0, 1, 2)):
        torch.manual_seed(0)
        model = TransformerGNN(hidden=32, heads=2, layers=3)
        model.checkpoint_layers = set(layers)
        with ActivationMeter(model) as meter:
            cand_logp, idle_logp, keep = policy_log_probs(model, batch, 8)
            loss, _, _ = imitation_loss(
                cand_logp,
                idle_logp,
                batch.cand_index[0, keep],
                batch.cand_label[keep],
                batch.busy,
                batch.node_type == 0,
            )
        loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        memory.append(meter.bytes)
    assert torch.allclose(grads[0], grads[1], atol=1e-6) and torch.allclose(grads[0], grads[2], atol=1e-6)
    assert memory[0] > memory[1] > memory[2]


def test_auto_batch_size_fits_an_artificial_cap_and_runs(store) -> None:
    model = TransformerGNN(hidden=32, heads=2, layers=2)
    loss_of = lambda net, batch: batch_imitation_loss(net, batch)[0]  # noqa: E731 - the imitation step
    items, cpu = Budgeted(store, 8), torch.device("cpu")
    one = step_memory_mb(model, loss_of, items, 8, cpu)
    limit = 5 * one  # room for about 4x the smallest batch
    chosen = find_batch_size(model, loss_of, items, cpu, memory_fraction=0.9, memory_limit_mb=limit)
    budget = 0.9 * limit
    assert step_memory_mb(model, loss_of, items, chosen, cpu) <= budget
    assert chosen * 2 > len(store) or step_memory_mb(model, loss_of, items, chosen * 2, cpu) > budget
    assert chosen & (chosen - 1) == 0 and chosen >= 8  # a power of two
    with pytest.raises(MemoryBudgetError, match="hardware.batch_size=auto: even 8 graphs"):
        find_batch_size(model, loss_of, items, cpu, memory_fraction=0.9, memory_limit_mb=one / 10)


@pytest.mark.slow
def test_profile_mode_reports_every_stage_and_a_trace(tmp_path) -> None:
    out = tmp_path / "profile"
    proc = run_cli(
        "mode=profile",
        *TINY,
        "profile.steps=6",
        "profile.warmup=1",
        "profile.torch_profiler=true",
        "hardware.batch_size=auto",
        "hardware.memory_limit_mb=50",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={out}",
        cwd=tmp_path,
    )
    report = json.loads((out / "profile.json").read_text())
    stages = {s["stage"]: s for s in report["stages"]}
    assert set(stages) == {"data_wait", "h2d_copy", "forward", "backward", "optimizer", "eval_decode"}
    assert all(s["ms_per_step"] >= 0 for s in stages.values())
    assert sum(s["share"] for s in stages.values()) == pytest.approx(1.0)
    assert report["step_ms"] == pytest.approx(sum(s["ms_per_step"] for s in stages.values()))
    assert report["bottleneck"] == max(stages, key=lambda s: stages[s]["share"])
    assert report["graphs_per_s"] == pytest.approx(1000 * report["batch_size"] / report["step_ms"])
    assert report["batch_size"] >= 8 and report["peak_memory_mb"] > 0 and report["activation_memory_mb"] > 0
    assert report["recommendations"] and f"bottleneck: {report['bottleneck']}" in proc.stdout
    assert (out / "profile.png").stat().st_size > 0
    assert list((out / "profiler").glob("*.pt.trace.json"))  # TensorBoard trace handler output


@pytest.mark.slow
def test_quick_benchmark_writes_every_section_with_repeats_and_the_dashboard(tmp_path) -> None:
    """``benchmark=quick`` (what ``experiment=debug`` picks), shrunk further; 22 s as shipped
    (BENCHMARKS.md), seconds here."""
    out = tmp_path / "bench"
    proc = run_cli(
        "mode=benchmark",
        *TINY,
        "benchmark=quick",
        "benchmark.repeats=2",
        "benchmark.cache_scenes=12",
        "benchmark.scenes=32",
        "benchmark.pipeline_steps=2",
        "benchmark.toggle_model=tiny",
        "benchmark.toggle_batch_size=16",
        "benchmark.checkpoint_batch_size=16",
        "benchmark.scaling_nodes=[300,1500,6000]",
        "benchmark.milp_uavs=[24]",
        "logger=tensorboard",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={out}",
        cwd=tmp_path,
    )
    assert "this preset takes about 0.5 min" in proc.stdout.splitlines()[0]  # said before anything runs
    report = json.loads((out / "benchmark.json").read_text())
    assert {"cache", "pipeline", "toggles", "scaling", "milp"} <= set(report)
    assert report["cache"]["cold_build_s"] > report["cache"]["warm_load_s"] > 0
    pipeline = report["pipeline"]
    assert set(pipeline["graphs_per_s"]) == {"naive", "optimized", "optimized_amp"}
    assert pipeline["optimized_over_naive"] == pytest.approx(
        pipeline["graphs_per_s"]["optimized"] / pipeline["graphs_per_s"]["naive"]
    )
    assert pipeline["max_logit_diff"] < 1e-5
    toggles = {t["toggle"]: t for t in report["toggles"]}
    assert set(toggles) == {"amp", "grad_checkpoint", "loader_pyg"}
    for t in toggles.values():
        assert t["speedup"] == pytest.approx(t["off"]["step_ms"] / t["on"]["step_ms"])
    assert toggles["grad_checkpoint"]["memory_saving"] > 0.3  # recomputation really drops saved activations
    rows = report["scaling"]["rows"]
    assert [r["nodes"] for r in rows] == [300, 1500, 6000]
    # medians of 2 repeats are their means, so the parts' medians add up to the total's
    assert all(r["total_s"] == pytest.approx(r["build_s"] + r["forward_s"] + r["decode_s"]) for r in rows)
    assert 0 < report["scaling"]["loglog_slope"] < 3
    milp = report["milp"]["rows"][0]
    assert milp["n_uav"] == 24 and milp["milp_status"] == "optimal"
    # an untrained model (no ckpt): its gap is no result, and the console says so beside the section
    assert milp["gap_vs_milp"] is None and "its rewards and gaps are not results" in proc.stdout
    others = ("model_reward", "greedy_reward", "lap_reward", "mcf_reward")
    assert milp["milp_reward"] >= max(milp[key] for key in others) - 1e-9
    # every timing is a median of its repeats, with their range; the noisy ones are named
    figures = (
        [pipeline["repeats"][name] for name in pipeline["graphs_per_s"]]
        + [t["repeats"][side] for t in report["toggles"] for side in ("off", "on")]
        + [r["repeats"] for r in rows]
    )
    for figure in figures:
        assert figure["repeats"] == 2 and figure["min"] <= figure["median"] <= figure["max"]
        assert figure["spread"] == pytest.approx((figure["max"] - figure["min"]) / figure["median"])
    assert pipeline["graphs_per_s"]["naive"] == pipeline["repeats"]["naive"]["median"]
    noisy = {f["figure"] for f in figures if f["spread"] > 0.2}
    assert noisy <= {line.split(":")[0] for line in report["noisy"]}
    assert ("disagree by more than 20%" in proc.stdout) == bool(report["noisy"])
    assert (out / "graph_benchmark.png").stat().st_size > 0
    logged = EventAccumulator(str(out / "tensorboard")).Reload().Tags()  # the tables as text, the picture
    assert {"benchmark/pipeline/text_summary", "benchmark/milp/text_summary"} <= set(logged["tensors"])
    assert logged["images"] == ["benchmark/summary"]
    # config against the headline figures, in the run itself (a subfolder would be listed as a second run)
    assert logged["tensors"] and not [p for p in (out / "tensorboard").iterdir() if p.is_dir()]
    view = EventAccumulator(str(out / "tensorboard")).Reload().PluginTagToContent("hparams")
    assert {"_hparams_/experiment", "_hparams_/session_start_info", "_hparams_/session_end_info"} <= set(view)
    # its hyperparameters: what the command line chose (not every config key), numbers as numbers
    start = HParamsPluginData.FromString(view["_hparams_/session_start_info"]).session_start_info.hparams
    assert start["benchmark.scenes"].number_value == 32 and start["benchmark"].string_value == "quick"
    assert not {"data.cache_dir", "hydra.run.dir", "logger", "model.hidden"} & set(start)


@pytest.mark.slow
@pytest.mark.heavy  # torch.compile on a CPU: 40 s; `pytest -m heavy` runs it
def test_info_mode_checks_the_environment(tmp_path) -> None:
    out = tmp_path / "info"
    proc = run_cli("mode=info", f"hydra.run.dir={out}", cwd=tmp_path)
    info = json.loads((out / "info.json").read_text())
    assert info["versions"]["torch"] == torch.__version__ and info["versions"]["python"].startswith("3.")
    assert info["devices"][0]["device"] == "cpu" and info["devices"][0]["cpu_count"] >= 1
    trials = {t["trial"].split(" ")[0]: t for t in info["trials"]}
    assert trials["fp32"]["ok"]  # the plain step must work anywhere the tests run
    assert {"AMP", "torch.compile"} <= set(trials)
    own = [t for t in info["trials"] if t["trial"].startswith("algorithm=")]
    assert [t["trial"].split(":")[0] for t in own] == ["algorithm=coma", "algorithm=mappo", "algorithm=masac"]
    assert all(t["ok"] for t in own)  # the environment and every MARL update run here
    assert info["rates"]["matmul_float32_gflops"] > 0 and info["rates"]["copy_gb_per_s"] > 0
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    allowed = {0: {"cpu"}, 1: {"low_mem", "mid_mem", "high_mem"}}.get(gpus, {"multi_gpu"})
    assert info["recommended"]["hardware"] in allowed  # from the device count, not from info's own answer
    assert f"hardware={info['recommended']['hardware']}" in proc.stdout
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("recommended: ")]
    command = line.removeprefix("recommended: ").rsplit("   (", 1)[0]
    pasted = subprocess.run(f"{command} --cfg job", shell=True, cwd=tmp_path, capture_output=True, text=True)
    assert pasted.returncode == 0 and f"name: {info['recommended']['hardware']}" in pasted.stdout  # runs as printed


@pytest.mark.parametrize(
    "found, preset",
    [
        ([{"device": "cpu"}], "cpu"),
        ([{"device": "cpu"}, {"device": "cuda:0", "memory_gib": 8.0}], "low_mem"),
        ([{"device": "cpu"}, {"device": "cuda:0", "memory_gib": 24.0}], "mid_mem"),
        ([{"device": "cpu"}, {"device": "cuda:0", "memory_gib": 79.6}], "high_mem"),
        (
            [{"device": "cpu"}, {"device": "cuda:0", "memory_gib": 80.0}, {"device": "cuda:1", "memory_gib": 80.0}],
            "multi_gpu",
        ),
    ],
)
def test_recommended_preset_for_hand_made_machines(found, preset) -> None:
    from uavgnn.modes.info import recommend_preset

    assert recommend_preset(found)[0] == preset
