"""Data parallelism (torchrun + gloo on this CPU) and cluster launchers, run for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import ROOT, job_dirs, run_cli
from omegaconf import OmegaConf
from wandb_records import run_record

from uavgnn.data.loader import ShardedBatchSampler
from uavgnn.infrastructure import distributed
from uavgnn.runs.checkpoints import load_checkpoint, load_part

DEBUG = [
    "experiment=debug",
    "model=tiny",
    "data.n_uav=6",
    "data.train_scenes=64",
    "data.val_scenes=8",
    "data.test_scenes=8",
    "hardware.batch_size=16",
    "train.steps=12",
    "train.eval_every=6",
    "train.ckpt_every=6",
    "train.log_every=3",
    "train.warmup_steps=2",
    "hardware.threads=1",
]


def torchrun(*overrides: str, cwd: Path, nproc: int = 2) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        str(ROOT / "run.py"),
        *overrides,
    ]
    proc = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert proc.returncode == 0, f"torchrun failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def slurm_tasks(*overrides: str, cwd: Path, ntasks: int = 2) -> None:
    """``run.py`` started as the ``ntasks`` tasks of a SLURM job: SLURM's variables only, no torchrun's."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") and not k.startswith("SLURM_")
    }
    job = {
        "SLURM_NTASKS": str(ntasks),
        "SLURM_STEP_NUM_TASKS": str(ntasks),
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_JOB_ID": str(os.getpid()),
        "OMP_NUM_THREADS": "1",
    }
    procs = [
        subprocess.Popen(
            [sys.executable, str(ROOT / "run.py"), *overrides],
            cwd=cwd,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**env, **job, "SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)},
        )
        for r in range(ntasks)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"SLURM task failed ({proc.returncode}):\n{out}\n{err}"


def test_a_slurm_job_list_names_its_first_host_and_the_tasks_their_ranks() -> None:
    lists = ("gpu[03-05,09],cpu1", "node7", "a,b", "x[7]", "big-node[10-12]", "gpu-[01-04]-ib", "rack[1-2]-n[01-04]")
    assert [distributed.first_host(n) for n in lists] == [
        "gpu03",
        "node7",
        "a",
        "x7",
        "big-node10",
        "gpu-01-ib",
        "rack1-n01",
    ]
    batch_script = {
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "8",
        "SLURM_LOCALID": "0",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "gpu[03-06]",
    }  # what an sbatch script sees itself, without srun
    assert distributed.scheduler_environment(batch_script) == {}  # one process: not rank 0 of 8 that never come
    task = {**batch_script, "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_STEP_NUM_TASKS": "8"}  # srun's task
    assert distributed.scheduler_environment(task) == {
        "RANK": "3",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "gpu03",
        "MASTER_PORT": str(15000 + 4242),
    }
    assert distributed.scheduler_environment({**task, "MASTER_PORT": "29500"})["MASTER_PORT"] == "29500"
    assert distributed.scheduler_environment({**task, "SLURM_STEP_NUM_TASKS": "1"}) == {}  # `srun -n 1`: no group
    assert distributed.scheduler_environment({**task, "WORLD_SIZE": "2"}) == {}  # torchrun inside the job wins
    assert distributed.scheduler_environment({**task, "SLURM_PTY_PORT": "4000"}) == {}  # `srun --pty bash`: a shell
    second_step = distributed.scheduler_environment({**task, "SLURM_STEP_ID": "1"})  # two steps of one job at once
    assert second_step["MASTER_PORT"] != distributed.scheduler_environment(task)["MASTER_PORT"]
    local = {
        "SUBMITIT_LOCAL_GLOBALID": "1",
        "SUBMITIT_LOCAL_NTASKS": "2",
        "SUBMITIT_LOCAL_LOCALID": "1",
        "SUBMITIT_LOCAL_JOB_ID": "777",
    }
    assert distributed.scheduler_environment(local) == {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "localhost",
        "MASTER_PORT": "15777",
    }


def history(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("shuffle", [True, False])
def test_shards_cover_every_sample_once_per_epoch_and_rebuild_the_global_batch(shuffle) -> None:
    size, batch, world = 48, 12, 3
    single = ShardedBatchSampler(size, batch, shuffle, seed=5)
    ranks = [ShardedBatchSampler(size, batch, shuffle, seed=5, rank=r, world_size=world) for r in range(world)]
    orders = []
    for epoch in (0, 1):
        for sampler in (single, *ranks):
            sampler.set_epoch(epoch)
        per_rank = [list(r) for r in ranks]
        seen = [i for batches in per_rank for b in batches for i in b]
        assert sorted(seen) == list(range(size))  # every sample exactly once across ranks
        assert all(len(b) == batch // world for batches in per_rank for b in batches)
        for step, global_batch in enumerate(single):  # the ranks' step-t batches are the single process's
            assert sorted(global_batch) == sorted(i for batches in per_rank for i in batches[step])
        orders.append([i for b in single for i in b])
    assert (orders[0] != orders[1]) == shuffle  # reshuffled each epoch


def test_global_batch_must_split_evenly_over_ranks() -> None:
    with pytest.raises(ValueError, match="hardware.batch_size=10 .* divisible by the 4 processes"):
        ShardedBatchSampler(100, 10, True, rank=0, world_size=4)


def _collectives(rank: int, world: int, init: str, log_path: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        with distributed.main_rank_first():
            with open(log_path, "a") as f:
                f.write(f"{rank}\n")
        assert distributed.all_reduce_sum(torch.tensor([1.0, float(rank)])).tolist() == [world, sum(range(world))]
        assert distributed.broadcast_from_main({"gap": 0.5} if rank == 0 else None) == {"gap": 0.5}
        assert distributed.context() == distributed.DistContext(rank, world, 0)
    finally:
        dist.destroy_process_group()


def test_main_rank_goes_first_and_reductions_span_ranks(tmp_path) -> None:
    log_path = tmp_path / "order.txt"
    mp.spawn(_collectives, args=(3, f"file://{tmp_path / 'store'}", str(log_path)), nprocs=3)
    order = log_path.read_text().split()
    assert order[0] == "0" and sorted(order) == ["0", "1", "2"]  # rank 0 (the cache builder) strictly first


def gloo_run(tmp_path: Path) -> Path:
    """A two-process torchrun job (gloo) with wandb: one run directory, one wandb run, rank 0 alone tests."""
    ddp = torchrun(*DEBUG, f"data.cache_dir={tmp_path / 'cache'}", "logger=wandb", cwd=tmp_path)
    run_dirs = [p for p in (tmp_path / "outputs").glob("*/*") if p.is_dir()]
    assert len(run_dirs) == 1, run_dirs  # one Hydra run directory, not one per rank
    run_dir = run_dirs[0]
    assert "global batch 16 = 8 per rank" in (run_dir / "run.log").read_text()
    assert sorted(p.name for p in run_dir.glob("*.pt")) == ["best.pt", "last.pt"]
    wandb_files = list(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(wandb_files) == 1 and run_record(wandb_files[0]).run_id  # one wandb run
    assert ddp.stdout.count("Test set:") == 1  # rank 0 alone tests and reports
    return run_dir


@pytest.mark.slow
def test_two_process_gloo_run_matches_one_process(tmp_path) -> None:
    run_dir = gloo_run(tmp_path)
    run_cli(
        *DEBUG,
        f"data.cache_dir={tmp_path / 'cache'}",
        "logger=jsonl",
        f"hydra.run.dir={tmp_path / 'single'}",
        cwd=tmp_path,
    )
    one, two = history(tmp_path / "single"), history(run_dir)
    assert [r["step"] for r in one] == [r["step"] for r in two]  # one jsonl, no rank writes twice
    for a, b in zip(one, two):
        for key in ("train/loss", "train/acc"):
            if key in a:  # the same global batches and the exact full-batch gradient: float rounding only
                assert b[key] == pytest.approx(a[key], rel=1e-4), (a["step"], key)
        if "val/optimality_gap" in a:  # greedy decoding of near-identical weights: the same assignments
            assert b["val/optimality_gap"] == pytest.approx(a["val/optimality_gap"], abs=1e-6)
            assert b["val/reward"] == pytest.approx(a["val/reward"], abs=1e-6)


@pytest.mark.heavy  # two more multi-process jobs (~25 s); the torchrun job itself runs by default (above)
def test_a_slurm_jobs_tasks_train_what_torchrun_does_and_a_gloo_run_resumes(tmp_path) -> None:
    run_dir, cache = gloo_run(tmp_path), f"data.cache_dir={tmp_path / 'cache'}"
    slurm_tasks(*DEBUG, cache, "logger=jsonl", f"hydra.run.dir={tmp_path / 'slurm'}", cwd=tmp_path)
    by_slurm, by_torchrun = (
        torch.load(d / "last.pt", weights_only=False)["model"] for d in (tmp_path / "slurm", run_dir)
    )
    for name, value in by_torchrun.items():  # a SLURM job's tasks train exactly what torchrun's processes do
        torch.testing.assert_close(by_slurm[name], value, rtol=0, atol=0)
    assert "global batch 16 = 8 per rank" in (tmp_path / "slurm" / "run.log").read_text()

    wandb_id = {run_record(f).run_id for f in run_dir.glob("wandb/offline-run-*/run-*.wandb")}
    torchrun(*DEBUG, cache, "logger=wandb", "resume=true", "train.steps=18", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    resumed = history(run_dir)
    assert [r["step"] for r in resumed if "train/loss" in r] == [3, 6, 9, 12, 15, 18]
    assert torch.load(run_dir / "last.pt", weights_only=False)["state"]["step"] == 18
    # offline wandb writes one directory per session; both carry the one run id, so a sync merges them
    assert {run_record(f).run_id for f in run_dir.glob("wandb/offline-run-*/run-*.wandb")} == wandb_id


@pytest.mark.heavy  # the joblib and basic launchers run in the default suite
def test_sweep_on_submitit_local_launcher(tmp_path) -> None:
    sweep = tmp_path / "sweep"
    run_cli(
        "-m",
        "hydra/launcher=submitit_local",
        *DEBUG,
        "logger=jsonl",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.sweep.dir={sweep}",
        "model=tiny,small",
        cwd=tmp_path,
    )
    for job, model in zip(job_dirs(sweep), ("tiny", "small"), strict=True):
        assert job.name.endswith(f"model:{model}")
        summary = json.loads((job / "summary.json").read_text())
        assert summary["steps"] == 12
        assert json.loads((job / "metrics.jsonl").read_text().splitlines()[0])["model/params"] > 0
    assert list((sweep / ".submitit").iterdir())  # submitit's own job records


# two torchrun jobs of MASAC: ~27 s; `pytest -m heavy` runs it (the imitation DDP test stays in the default suite)
@pytest.mark.heavy
def test_masac_under_torchrun_steps_its_own_environments_and_resumes(tmp_path) -> None:
    """(Bit-exact resume of one process: tests/algorithms/test_masac.py; of a DDP run: the imitation test above.)"""
    masac = [
        "algorithm=masac",
        "logger=jsonl",
        "env.n_envs=4",
        "env.val_episodes=8",
        "algorithm.learning_starts=8",
        "algorithm.buffer_size=256",
        "model.hidden=16",
        "algorithm.critic_hidden=16",
        "hardware.batch_size=16",
        "train.eval_every=4",
        "train.ckpt_every=4",
        "train.log_every=2",
        "hardware.threads=1",
        "train.schedule=plateau",
        "algorithm.priority_beta=1.0",
    ]
    run = tmp_path / "ddp"
    torchrun(*masac, "train.steps=4", f"hydra.run.dir={run}", cwd=tmp_path)
    rank0 = torch.load(run / "last.pt", weights_only=True)["data"]
    rank1 = load_part(run / "last.rank1.data.pt")  # verified against its checksum
    assert rank0["env_steps"] == rank1["env_steps"] == 4 * 4  # 4 envs per rank, one step per update
    assert not torch.equal(rank0["buffer"]["data"]["obs"], rank1["buffer"]["data"]["obs"])  # its own environments
    torchrun(*masac, "train.steps=8", "resume=auto", f"hydra.run.dir={run}", cwd=tmp_path)
    resumed = load_part(run / "last.rank1.data.pt")
    assert resumed["env_steps"] == 8 * 4  # rank 1 went on from its own saved environments, not rank 0's
    torch.testing.assert_close(resumed["buffer"]["data"]["obs"][:16], rank1["buffer"]["data"]["obs"])
    assert [row["step"] for row in history(run) if "train/loss" in row] == [2, 4, 6, 8]


@pytest.mark.slow
@pytest.mark.heavy  # 15 s each (CI margin); the shared DDP loop runs by default for imitation and MASAC
@pytest.mark.parametrize("algorithm", ["coma", "mappo"])
def test_on_policy_algorithms_under_torchrun_collect_their_own_episodes(tmp_path, algorithm) -> None:
    """Each rank plays its share of the episodes in its own environments; DDP averages the gradients."""
    run = tmp_path / algorithm
    torchrun(
        f"algorithm={algorithm}",
        "env=discrete",
        "logger=jsonl",
        "hardware.batch_size=8",
        "algorithm.minibatches=2",
        "algorithm.data_passes=1",
        "env.val_episodes=8",
        "model.hidden=16",
        "algorithm.critic_hidden=16",
        "train.steps=4",
        "train.eval_every=4",
        "train.ckpt_every=4",
        "train.log_every=2",
        "hardware.threads=1",
        f"hydra.run.dir={run}",
        cwd=tmp_path,
    )
    rank0 = torch.load(run / "last.pt", weights_only=True)["data"]
    rank1 = load_part(run / "last.rank1.data.pt")  # verified against its checksum
    assert rank0["episodes"]["obs"].shape[0] == rank1["episodes"]["obs"].shape[0] == 4 * 2  # 4 per minibatch
    assert rank0["env_steps"] == rank1["env_steps"] == 2 * 8 * 14  # two collections of 8 episodes, 14 steps
    assert not torch.equal(rank0["episodes"]["obs"], rank1["episodes"]["obs"])
    assert [row["step"] for row in history(run) if "train/loss" in row] == [2, 4]


@pytest.mark.heavy  # ~20 s
def test_the_main_jobs_two_phases_under_torchrun(tmp_path) -> None:
    """Both ranks start REINFORCE from rank 0's best.pt (broadcast, not read by each rank) and train on."""
    run = tmp_path / "phases"
    torchrun(
        *DEBUG,
        f"data.cache_dir={tmp_path / 'cache'}",
        "algorithm=imitation_reinforce",
        "data.source=generated",
        "algorithm.imitation_steps=6",
        "train.steps=12",
        "train.warmup_steps=0",
        "logger=jsonl",
        f"hydra.run.dir={run}",
        cwd=tmp_path,
    )
    rows = history(run)
    assert [r["step"] for r in rows if r.get("event") == "phase reinforce"] == [6]
    assert {r["step"] for r in rows if "train/acc" in r} <= set(range(7)) and any(
        "train/sample_reward" in r for r in rows
    )
    assert torch.load(run / "last.pt", weights_only=True)["state"]["step"] == 12


@pytest.mark.heavy  # two jobs of two DDP processes each: ~1 min on 2 cores
def test_a_submitit_sweep_whose_jobs_are_two_process_ddp_runs(tmp_path) -> None:
    sweep = tmp_path / "sweep"
    run_cli(
        "-m",
        "hydra/launcher=submitit_local",
        "hydra.launcher.tasks_per_node=2",
        *DEBUG,
        "logger=jsonl",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.sweep.dir={sweep}",
        "model=tiny,small",
        cwd=tmp_path,
    )
    for job, model in zip(job_dirs(sweep), ("tiny", "small"), strict=True):
        assert "global batch 16 = 8 per rank" in (job / "run.log").read_text()  # each job: a DDP run
        rows = history(job)
        assert [r["step"] for r in rows if "train/loss" in r] == [3, 6, 9, 12]  # one history, no rank twice
        assert json.loads((job / "summary.json").read_text())["steps"] == 12
        assert OmegaConf.load(job / ".hydra" / "config.yaml").model.name == model
    report = run_cli("mode=compare", f"path={sweep}", cwd=tmp_path)
    assert "tiny" in report.stdout and "small" in report.stdout


def test_a_process_a_rank_started_does_not_join_the_group_again(monkeypatch) -> None:
    """A joblib worker of a torchrun rank inherits WORLD_SIZE and MASTER_*, not the rank: it trains alone."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv(distributed.GROUP_PID_ENV, str(os.getppid()))  # the parent formed the group
    assert distributed.init_from_launcher() == distributed.DistContext() and not dist.is_initialized()


def test_ranks_handed_different_configs_stop_before_training(tmp_path) -> None:
    """A resolver that differs per process (here the seed from each rank's RANK) would train two different
    models in one job: refused on every rank, in one line naming the key."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(ROOT / "run.py"),
        *DEBUG,
        "logger=jsonl",
        "seed=${oc.env:RANK}",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    proc = subprocess.run(
        cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0 and errors, proc.stderr[-3000:]
    assert "handed different configs: rank 1 has seed=1 (rank 0: 0)" in errors[0]
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # nothing trained


@pytest.mark.heavy  # two Optuna trials, each a two-process DDP job: ~1 min on 2 cores
def test_an_optuna_search_whose_trials_are_ddp_jobs_reports_each_trial_once(tmp_path) -> None:
    sweep = tmp_path / "search"
    proc = run_cli(
        "hparams_search=optuna",
        "hydra.sweeper.n_trials=2",
        "hydra/launcher=submitit_local",
        "hydra.launcher.tasks_per_node=2",
        *DEBUG,
        "logger=jsonl",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    jobs = job_dirs(sweep)  # one study (not one per rank), two trials, each one job of two ranks
    assert (proc.stdout + proc.stderr).count("A new study created") == 1 and len(jobs) == 2
    gaps = []
    for job in jobs:
        assert "global batch 16 = 8 per rank" in (job / "run.log").read_text()  # each trial: a 2-rank DDP run
        trained = load_checkpoint(job / "last.pt")["config"]  # rank 0's; every rank was checked to hold the same
        for override in OmegaConf.load(job / ".hydra" / "overrides.yaml"):
            key, value = override.split("=", 1)
            if key in ("train.lr", "model.hidden", "model.layers"):  # the trial's parameters, as trained
                assert OmegaConf.select(OmegaConf.create(trained), key) == pytest.approx(float(value)), key
        gaps.append(json.loads((job / "summary.json").read_text())["best_val_optimality_gap"])
    assert OmegaConf.load(sweep / "optimization_results.yaml").best_value == pytest.approx(min(gaps))


def test_a_gpu_preset_under_torchrun_without_a_gpu_warns_once_and_trains_on_the_cpu(tmp_path) -> None:
    """The README's promise: a GPU preset on a machine without a GPU warns and runs on the CPU, under torchrun
    too (``hardware=multi_gpu`` said "hardware.device=cuda but no CUDA device is available" twice, then a torchrun
    traceback)."""
    run = tmp_path / "run"
    proc = torchrun(
        *DEBUG,
        "hardware=multi_gpu",
        "hardware.batch_size=16",
        "train.steps=6",
        "logger=none",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={run}",
        cwd=tmp_path,
    )
    said = proc.stdout + proc.stderr
    assert said.count("hardware.device=auto: no CUDA device here, so the run goes on the CPU") == 1, said[-3000:]
    assert "Traceback" not in said and (run / "summary.json").exists()
    assert "global batch 16 = 8 per rank" in (run / "run.log").read_text()
