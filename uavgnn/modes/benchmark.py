"""``mode=benchmark``: what each optimization buys on this machine, measured side by side in one process.

Sections (``benchmark.sections``), each repeated ``benchmark.repeats`` times
with medians reported:

- ``cache``: cold build of a split (MILP labels + graphs) vs warm load from the cache;
- ``pipeline``: the optimized pipeline (cached graphs, vectorised gather; also
  with AMP) vs the naive reference (``uavgnn.data.naive``) in graphs/s of
  whole training steps, same model and data, plus the logits of both on one batch;
- ``toggles``: ``amp``, ``compile``, ``grad_checkpoint`` and the loader
  variants on vs off: step time and memory (CUDA: allocator peak; CPU:
  activation memory, since the process RSS only grows);
- ``scaling``: one scene of N nodes (build, forward, decode, peak RSS) and the
  log-log slope of time vs N (sizes over ``LONG_RUN_S`` per run are run once);
- ``milp``: the model vs the time-limited MILP (and greedy, lap) at 1k-16k UAVs.

The model of ``scaling``/``milp`` is ``ckpt`` when given (a trained model),
else a freshly initialised one of ``model`` (timings only; its gaps mean nothing).
Every timing carries its repeat count and spread; figures whose repeats disagree
by more than ``NOISY`` are listed at the end (a busy machine). Writes
``benchmark.json`` and ``graph_benchmark.png`` into the run directory and logs
the tables and the picture to the configured dashboard.
"""

from __future__ import annotations

import logging
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf
from torch_geometric.data import Batch

from uavgnn.algorithms.base import Algorithm, LossOf, step_loss
from uavgnn.algorithms.registry import algorithm_class, algorithms, make_algorithm
from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.config.schemas import Config
from uavgnn.config.settings import graph_settings, scene_distribution, split_settings, transformer
from uavgnn.data.cache import load_or_build
from uavgnn.data.loader import make_loader
from uavgnn.data.naive import NaiveSceneDataset, naive_loader
from uavgnn.data.splits import load_split, split_spec
from uavgnn.data.store import GraphStore
from uavgnn.inference.scene import solve_with_model
from uavgnn.infrastructure.console import count, echo
from uavgnn.infrastructure.device import amp_dtype, maybe_compile, prepare_device
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.infrastructure.perf import ActivationMeter, peak_memory_mb, synchronize
from uavgnn.infrastructure.storage import write_json
from uavgnn.loggers import publish
from uavgnn.models import TransformerGNN, model_from_config
from uavgnn.models.policy import policy_log_probs
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.graphs import GraphSettings, with_budget
from uavgnn.reporting.benchmark_report import measure, noisy_figures, print_report, section_rows
from uavgnn.reporting.pictures import plot_benchmark
from uavgnn.runs.layout import BENCHMARK, BENCHMARK_PICTURE
from uavgnn.solvers import solve

log = logging.getLogger(__name__)
# the report's headline figures, (section, key), for the dashboard's run summary
HEADLINES = [
    ("cache", "cold_over_warm"),
    ("pipeline", "optimized_over_naive"),
    ("pipeline", "optimized_amp_over_naive"),
    ("scaling", "loglog_slope"),
]
LONG_RUN_S = 10.0  # a scaling size whose first run takes longer is not repeated (1M nodes: ~2 min each here)


def model_named(name: str, grad_checkpoint: bool = False) -> TransformerGNN:
    """A model preset by name, read from the installed package (not a ``conf/`` folder by path)."""
    preset = resources.files("uavgnn.conf").joinpath("model", f"{name}.yaml").read_text()
    return model_from_config(transformer(OmegaConf.create(preset)), grad_checkpoint)


def train_step(loss_of: LossOf, model: TransformerGNN, optimizer: torch.optim.Optimizer, batch: Batch) -> float:
    """One step of the configured algorithm (its loss, backward, AdamW); returns the activation MB it saved."""
    with ActivationMeter(model) as meter:
        loss = loss_of(model, batch)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    synchronize(batch.x.device)
    return meter.mb


def timed_steps(
    algorithm: Algorithm,
    model: TransformerGNN,
    batches: Callable[[], Iterator[Batch]],
    steps: int,
    k: int,
    device: torch.device,
    dtype: torch.dtype | None = None,
    compiled: bool = False,
    warmup: int = 1,
) -> dict[str, float]:
    """Median seconds per step (data included) and graphs/s over ``steps`` steps after ``warmup``."""
    model = model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times, graphs, activation = [], [], 0.0
    loss_of = maybe_compile(step_loss(algorithm, device, dtype), compiled)
    stream = batches()
    for i in range(warmup + steps):
        start = time.perf_counter()
        batch = next(stream).to(device)
        activation = train_step(loss_of, model, optimizer, with_budget(batch, k))
        if i >= warmup:
            times.append(time.perf_counter() - start)
            graphs.append(batch.num_graphs)
    step_s = statistics.median(times)
    memory = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else activation
    return {"step_ms": 1000 * step_s, "graphs_per_s": statistics.median(graphs) / step_s, "memory_mb": memory}


def cycle(loader) -> Callable[[], Iterator[Batch]]:
    def stream() -> Iterator[Batch]:
        while True:
            yield from loader

    return stream


def random_batches(store: GraphStore, size: int, seed: int = 0) -> Callable[[], Iterator[Batch]]:
    def stream() -> Iterator[Batch]:
        gen = torch.Generator().manual_seed(seed)
        while True:
            yield store.gather(torch.randint(0, len(store), (size,), generator=gen))

    return stream


def preset_batch_size(cfg: Config, store: GraphStore) -> int:
    """The preset's batch (64 under ``auto``: the benchmark compares like with like), at most the split."""
    return min(int(cfg.hardware.batch_size) if cfg.hardware.batch_size != "auto" else 64, len(store))


def bench_cache(cfg: Config, device: torch.device, out_dir: Path) -> dict[str, Any]:
    splits = split_settings(cfg)
    spec = split_spec(splits, "train", count=cfg.benchmark.cache_scenes)
    work = out_dir / "benchmark-cache"
    shutil.rmtree(work, ignore_errors=True)
    args = (spec, splits.dist, splits.build, work)
    try:
        start = time.perf_counter()
        load_or_build(*args, workers=cfg.data.label_workers)
        cold = time.perf_counter() - start
        warm = []
        for _ in range(cfg.benchmark.repeats):
            start = time.perf_counter()
            load_or_build(*args, workers=cfg.data.label_workers)
            warm.append(time.perf_counter() - start)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    warm_load = measure(warm, "cache warm load")
    return {
        "scenes": spec.count,
        "n_uav": spec.n_uav,
        "cold_build_s": cold,
        "warm_load_s": warm_load["median"],
        "cold_over_warm": cold / warm_load["median"],
        "repeats": {"cold_build_s": 1, "warm_load_s": warm_load},
    }


def bench_pipeline(cfg: Config, device: torch.device, out_dir: Path) -> dict[str, Any]:
    store = load_split(split_settings(cfg), "train", count=cfg.benchmark.scenes)
    batch_size = preset_batch_size(cfg, store)
    k = graph_settings(cfg).k(cfg.data.n_uav)
    algorithm = make_algorithm(cfg, device)
    scenes, labels = store.scenes(), store.label_assignments()
    naive = naive_loader(scenes, labels, batch_size, cfg.data.k_max, cfg.data.uav_neighbours)
    fast = make_loader(store, "memory", batch_size, shuffle=True, drop_last=True)
    init = model_from_config(transformer(cfg.model)).state_dict()

    def model() -> TransformerGNN:
        fresh = model_from_config(transformer(cfg.model))
        fresh.load_state_dict(init)
        return fresh

    steps = cfg.benchmark.pipeline_steps
    rows = {"naive": [], "optimized": [], "optimized_amp": []}
    for _ in range(cfg.benchmark.repeats):  # interleaved, so machine noise hits all alike
        rows["naive"].append(timed_steps(algorithm, model(), cycle(naive), steps, k, device))
        rows["optimized"].append(timed_steps(algorithm, model(), cycle(fast), steps, k, device))
        rows["optimized_amp"].append(
            timed_steps(algorithm, model(), cycle(fast), steps, k, device, dtype=torch.bfloat16)
        )
    spread = {
        name: measure([r["graphs_per_s"] for r in runs], f"pipeline {name} graphs/s") for name, runs in rows.items()
    }
    rates = {name: figure["median"] for name, figure in spread.items()}
    ids = list(range(min(batch_size, len(store))))  # the same scenes through both pipelines
    dataset = NaiveSceneDataset(scenes, labels, cfg.data.k_max, cfg.data.uav_neighbours)
    reference = model().eval()
    with torch.no_grad():
        naive_logp = policy_log_probs(reference, Batch.from_data_list([dataset[i] for i in ids]), k)
        fast_logp = policy_log_probs(reference, store.gather(torch.tensor(ids)), k)
    diff = max(float((a - b).abs().max()) for a, b in zip(naive_logp[:2], fast_logp[:2]))
    return {
        "batch_size": batch_size,
        "model": cfg.model.name,
        "graphs_per_s": rates,
        "optimized_over_naive": rates["optimized"] / rates["naive"],
        "optimized_amp_over_naive": rates["optimized_amp"] / rates["naive"],
        "max_logit_diff": diff,
        "repeats": spread,
    }


def bench_toggles(cfg: Config, device: torch.device, out_dir: Path) -> list[dict[str, Any]]:
    b = cfg.benchmark
    store = load_split(split_settings(cfg), "train", count=b.scenes)
    k = graph_settings(cfg).k(cfg.data.n_uav)
    algorithm = make_algorithm(cfg, device)
    amp = torch.bfloat16 if device.type == "cpu" or cfg.hardware.precision == "bf16" else torch.float16
    big = random_batches(store, b.toggle_batch_size)
    ckpt = random_batches(store, b.checkpoint_batch_size)
    small = preset_batch_size(cfg, store)
    loaders = {
        kind: make_loader(store, kind, small, shuffle=True, num_workers=workers, drop_last=True)
        for kind, workers in (("memory", 0), ("pyg", 0))
    }
    loaders["pyg_2_workers"] = make_loader(
        store, "pyg", small, shuffle=True, num_workers=2, drop_last=True, persistent_workers=True
    )
    cases = {  # name: (off, on) as step runners
        "amp": (
            lambda: timed_steps(algorithm, model_named(b.toggle_model), big, b.pipeline_steps, k, device),
            lambda: timed_steps(algorithm, model_named(b.toggle_model), big, b.pipeline_steps, k, device, dtype=amp),
        ),
        "compile": (
            lambda: timed_steps(algorithm, model_named(b.toggle_model), big, b.pipeline_steps, k, device),
            lambda: timed_steps(
                algorithm, model_named(b.toggle_model), big, b.pipeline_steps, k, device, compiled=True, warmup=3
            ),
        ),
        "grad_checkpoint": (
            lambda: timed_steps(algorithm, model_named(b.checkpoint_model), ckpt, b.pipeline_steps, k, device),
            lambda: timed_steps(
                algorithm, model_named(b.checkpoint_model, grad_checkpoint=True), ckpt, b.pipeline_steps, k, device
            ),
        ),
        "loader_pyg": (  # PyG DataLoader, in-process collate, vs the in-memory gather
            lambda: timed_steps(
                algorithm,
                model_from_config(transformer(cfg.model)),
                cycle(loaders["memory"]),
                b.pipeline_steps,
                k,
                device,
            ),
            lambda: timed_steps(
                algorithm, model_from_config(transformer(cfg.model)), cycle(loaders["pyg"]), b.pipeline_steps, k, device
            ),
        ),
        "loader_pyg_workers": (  # the same with 2 worker processes
            lambda: timed_steps(
                algorithm,
                model_from_config(transformer(cfg.model)),
                cycle(loaders["memory"]),
                b.pipeline_steps,
                k,
                device,
            ),
            lambda: timed_steps(
                algorithm,
                model_from_config(transformer(cfg.model)),
                cycle(loaders["pyg_2_workers"]),
                b.pipeline_steps,
                k,
                device,
            ),
        ),
    }
    unknown = set(b.toggles) - set(cases)
    if unknown:
        raise ValueError(f"benchmark.toggles: unknown {sorted(unknown)} (expected some of {list(cases)})")
    rows = []
    for name in b.toggles:
        off_run, on_run = cases[name]
        off, on = {}, {}
        runs = []
        for repeat in range(b.repeats):  # off and on side by side in every repeat
            runs.append((off_run(), on_run()))
            log.info(
                "toggle %s, repeat %d/%d: off %.1f ms, on %.1f ms per step",
                name,
                repeat + 1,
                b.repeats,
                runs[-1][0]["step_ms"],
                runs[-1][1]["step_ms"],
            )
        for key in runs[0][0]:
            off[key] = statistics.median(r[0][key] for r in runs)
            on[key] = statistics.median(r[1][key] for r in runs)
        spread = {
            side: measure([r[i]["step_ms"] for r in runs], f"toggle {name} {side} step time")
            for i, side in enumerate(("off", "on"))
        }
        rows.append(
            {
                "toggle": name,
                "off": off,
                "on": on,
                "repeats": spread,
                "speedup": off["step_ms"] / on["step_ms"],
                "memory_saving": 1 - on["memory_mb"] / off["memory_mb"] if off["memory_mb"] else 0.0,
                "memory": "CUDA peak allocated" if device.type == "cuda" else "activations saved for backward",
            }
        )
    return rows


def benchmark_model(cfg: Config, device: torch.device) -> tuple[TransformerGNN, GraphSettings, str]:
    if cfg.ckpt:
        model, graph, _ = load_policy(cfg.ckpt, device, f"mode={cfg.mode} ckpt")
        return model, graph, f"trained ({cfg.ckpt})"
    return (
        model_from_config(transformer(cfg.model)).to(device).eval(),
        graph_settings(cfg),
        f"untrained {cfg.model.name} (timings only)",
    )


def bench_scaling(cfg: Config, device: torch.device, out_dir: Path) -> dict[str, Any]:
    model, graph, which = benchmark_model(cfg, device)
    dist = scene_distribution(cfg)
    rows = []
    warm_up = generate_scenes(dist, 8, 1, cfg.seed)[0]
    solve_with_model(model, warm_up, graph, cfg.eval.decoder, device)  # the first call's set-up, not timed
    for nodes in sorted(cfg.benchmark.scaling_nodes):
        n_uav = max(1, round(nodes / (1 + dist.target_ratio)))
        scene = generate_scenes(dist, n_uav, 1, cfg.seed + nodes)[0]
        runs = [solve_with_model(model, scene, graph, cfg.eval.decoder, device)[1]]
        while len(runs) < cfg.benchmark.repeats and sum(runs[0].values()) < LONG_RUN_S:
            runs.append(solve_with_model(model, scene, graph, cfg.eval.decoder, device)[1])
        totals = measure([sum(t.values()) for t in runs], f"scaling at {nodes} nodes")
        timing = {key: statistics.median(t[key] for t in runs) for key in runs[0]}
        rows.append(
            {
                "nodes": scene.n_uav + scene.n_target,
                "n_uav": scene.n_uav,
                **timing,
                "total_s": totals["median"],
                "repeats": totals,
                "peak_rss_mb": peak_memory_mb(torch.device("cpu")),
            }
        )
        log.info("scaling: %d nodes in %.2f s", rows[-1]["nodes"], totals["median"])
    fit = [r for r in rows if r["nodes"] >= 10_000] if sum(r["nodes"] >= 10_000 for r in rows) >= 2 else rows
    slope = (
        float(np.polyfit(np.log([r["nodes"] for r in fit]), np.log([r["total_s"] for r in fit]), 1)[0])
        if len(fit) >= 2
        else float("nan")
    )
    return {
        "model": which,
        "rows": rows,
        "loglog_slope": slope,
        "slope_range": [fit[0]["nodes"], fit[-1]["nodes"]] if fit else [],
    }


def bench_milp(cfg: Config, device: torch.device, out_dir: Path) -> dict[str, Any]:
    """Model (median of ``repeats`` runs; bf16 forward under ``optim.amp``) vs one MILP run per size."""
    model, graph, which = benchmark_model(cfg, device)
    dtype = amp_dtype(cfg, device)
    dist = scene_distribution(cfg)
    rows = []
    for n_uav in cfg.benchmark.milp_uavs:
        scene = generate_scenes(dist, n_uav, 1, cfg.data.test_seed + n_uav)[0]
        solve_with_model(model, scene, graph, cfg.eval.decoder, device, dtype)  # warm-up, not timed
        runs = [
            solve_with_model(model, scene, graph, cfg.eval.decoder, device, dtype) for _ in range(cfg.benchmark.repeats)
        ]
        ours, timing = sorted(runs, key=lambda run: run[0].wall_time)[len(runs) // 2]  # the median run
        model_time = measure([run[0].wall_time for run in runs], f"model at {n_uav} UAVs")
        milp = solve(scene, "milp", cfg.benchmark.milp_time_limit)
        row = {
            "n_uav": n_uav,
            "model_reward": ours.objective,
            "model_s": ours.wall_time,
            **timing,
            "milp_reward": milp.objective,
            "milp_s": milp.wall_time,
            "milp_status": milp.status,
            "milp_bound": milp.bound,
            "gap_vs_milp": 1 - ours.objective / milp.objective if cfg.ckpt else None,  # untrained: no result
            "milp_over_model_time": milp.wall_time / ours.wall_time,
            "repeats": {"model_s": model_time, "milp_s": 1},
        }
        for name in ("greedy", "lap", "mcf"):
            try:
                other = solve(scene, name)
                row[f"{name}_reward"], row[f"{name}_s"] = other.objective, other.wall_time
            except Exception as err:  # noqa: BLE001 - lap refuses scenes over its dense-matrix cap
                row[f"{name}_reward"], row[f"{name}_s"] = float("nan"), float("nan")
                log.info("milp section: %s skipped at %d UAVs (%s)", name, n_uav, err)
        rows.append(row)
        log.info("milp: %d UAVs, model %.2f s vs MILP %.1f s (%s)", n_uav, ours.wall_time, milp.wall_time, milp.status)
    return {"model": which, "rows": rows}


SECTIONS = {
    "cache": bench_cache,
    "pipeline": bench_pipeline,
    "toggles": bench_toggles,
    "scaling": bench_scaling,
    "milp": bench_milp,
}


def run_benchmark(cfg: Config, out_dir: Path) -> dict[str, Any]:
    unknown = set(cfg.benchmark.sections) - set(SECTIONS)
    if unknown:
        raise ConfigError(f"benchmark.sections: unknown {sorted(unknown)} (expected some of {list(SECTIONS)})")
    algorithm = algorithm_class(cfg.algorithm.name)
    if not algorithm.benchmarked:  # the plug-in says what measures it
        supported = ", ".join(name for name, found in algorithms().items() if found.benchmarked)
        raise ConfigError(
            f"mode=benchmark measures the scene-assignment pipeline of algorithm={supported}; "
            f"algorithm={algorithm.name}: time it with {algorithm.timed_by}"
        )
    device = prepare_device(cfg)
    b = cfg.benchmark
    hint = " (benchmark=quick: under a minute)" if b.expected_minutes > 2 else ""
    echo(
        f"benchmark: sections {', '.join(b.sections)}, {count(b.repeats, 'repeat')} each; this preset takes about "
        f"{b.expected_minutes:g} min on an idle 2-core laptop CPU, several times that on a busy one{hint}"
    )
    report: dict[str, Any] = {
        "device": str(device),
        "threads": torch.get_num_threads(),
        "repeats": cfg.benchmark.repeats,
    }
    for name in cfg.benchmark.sections:
        log.info("benchmark section %s ...", name)
        start = time.perf_counter()
        report[name] = SECTIONS[name](cfg, device, out_dir)
        log.info("benchmark section %s done in %.1f s", name, time.perf_counter() - start)
        write_json(out_dir / BENCHMARK, report)  # partial results survive a later failure
    report["noisy"] = noisy_figures(report)
    write_json(out_dir / BENCHMARK, report)
    print_report(report)
    plot_benchmark(report, out_dir / BENCHMARK_PICTURE)
    tables = {f"benchmark/{name}": rows for name, rows in section_rows(report).items()}
    publish(
        cfg,
        out_dir,
        tables,
        {"benchmark/summary": out_dir / BENCHMARK_PICTURE},
        {key: report[section][key] for section, key in HEADLINES if section in report},
    )
    echo(f"wrote {out_dir / BENCHMARK} and {out_dir / BENCHMARK_PICTURE}")
    return report
