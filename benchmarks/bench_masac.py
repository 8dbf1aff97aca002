"""MASAC update speed (batched vs reference/002's per-agent loops), each toggle before/after, and environment
throughput, side by side.

    .venv/bin/python benchmarks/bench_masac.py                # all sections
    .venv/bin/python benchmarks/bench_masac.py --section update --agents 2 4
    .venv/bin/python benchmarks/bench_masac.py --section toggles   # amp, compile, prioritized replay, batch size
    .venv/bin/python benchmarks/bench_masac.py --section env --vmas   # beside VMAS's discovery (pip install vmas)
    .venv/bin/python benchmarks/bench_masac.py --section ops    # aten ops per update, batched vs naive

Ops: the aten ops one update dispatches (``uavgnn.infrastructure.perf.OpCounter``; on a GPU each is at least one kernel
launch, so this is the ratio a GPU sees where a compute-bound CPU cannot show it), batched and naive, at each
``--agents``; counted on the second update (the first creates the optimiser's state). Sizes do not change the
count: batch 16 and hidden 32 keep the naive 64-agent update quick.

Update: one MASAC update (forward, backward, optimiser step, target averaging)
of ``MASACAgents`` vs ``NaiveMASAC`` on the same random batch, median of
``--repeats`` after warm-up; reference/002's sizes (batch 128, hidden 256).
Environment: agent-steps/s of ``UAVEnv.step`` with random actions; with
``--vmas``, VMAS's ``discovery`` scenario (the nearest published vectorised
multi-robot task: agents covering targets, continuous actions) at the same
sizes, a size skipped when its first step takes over ``--vmas-max-step-s``.
VMAS is an optional cross-check, not a dependency. Medians; ratios come from
the same process, back to back.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import statistics
import time
from collections.abc import Callable

import torch

from uavgnn.algorithms.masac import MASACAgents, MASACSettings, masac_loss
from uavgnn.algorithms.masac_naive import NaiveMASAC
from uavgnn.algorithms.registry import make_algorithm, make_model
from uavgnn.envs.policies import random_policy
from uavgnn.envs.replay import ReplayBuffer, Transitions
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.infrastructure.perf import OpCounter
from uavgnn.problem.scenes import SceneDistribution
from uavgnn.program.from_python import compose_config


def median_time(fn, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def setup(n: int, batch: int, hidden: int) -> tuple[MASACAgents, Transitions, torch.Tensor, torch.Tensor]:
    """Agents sized by the default env with ``n`` UAVs, a random batch and the policy noise."""
    dist, env = SceneDistribution(), EnvSettings(n_uav=n)
    obs, state = env.obs_dim(), env.state_dim(dist)
    agents = MASACAgents(MASACSettings(n, obs, state, 2, hidden, 2, hidden, 2, 0.95, 0.2))
    g = torch.Generator().manual_seed(0)
    data = Transitions(
        torch.randn(batch, n, obs, generator=g),
        torch.randn(batch, state, generator=g),
        torch.rand(batch, n, 2, generator=g) * 2 - 1,
        torch.randn(batch, n, generator=g),
        torch.randn(batch, n, obs, generator=g),
        torch.randn(batch, state, generator=g),
        torch.zeros(batch),
        torch.ones(batch),
        torch.arange(batch),
    )
    noise, next_noise = torch.randn(2, n, batch, 2, generator=g).unbind(0)
    return agents, data, noise, next_noise


def batched_update(
    agents: MASACAgents,
    data: Transitions | None,
    noise: torch.Tensor,
    next_noise: torch.Tensor,
    runner=None,
    amp: bool = False,
    next_data: Callable[[], Transitions] | None = None,
):
    """One update as the Trainer runs it: one loss, one backward, one optimiser step, target averaging; on
    ``data``, or on a fresh batch from ``next_data()`` each time."""
    optimizer = torch.optim.Adam(agents.parameters(), 3e-4)
    runner = functools.partial(masac_loss, agents) if runner is None else runner

    def update() -> None:
        batch = data if next_data is None else next_data()
        with torch.autocast(noise.device.type, torch.bfloat16, enabled=amp):
            loss, _, _ = runner(batch, noise, next_noise)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        agents.update_targets(0.005)

    return update


def bench_update(n: int, batch: int, hidden: int, repeats: int) -> dict[str, float]:
    agents, data, noise, next_noise = setup(n, batch, hidden)
    naive = NaiveMASAC(agents)
    t_batched = median_time(batched_update(agents, data, noise, next_noise), repeats)
    t_naive = median_time(lambda: naive.update(data, noise, next_noise), repeats)
    return {"agents": n, "batched_ms": 1000 * t_batched, "naive_ms": 1000 * t_naive, "speedup": t_naive / t_batched}


def ops_per_update(update: Callable[[], None]) -> int:
    """Aten ops of one call of ``update``, after one uncounted call."""
    update()
    with OpCounter() as counted:
        update()
    return counted.ops


def bench_ops(n: int) -> dict[str, float]:
    agents, data, noise, next_noise = setup(n, 16, 32)
    naive = NaiveMASAC(agents)
    batched_ops = ops_per_update(batched_update(agents, data, noise, next_noise))
    naive_ops = ops_per_update(lambda: naive.update(data, noise, next_noise))
    return {"agents": n, "batched_ops": batched_ops, "naive_ops": naive_ops, "ratio": naive_ops / batched_ops}


def print_ops(rows: list[dict[str, float]]) -> None:
    """The table, and how far the batched count moves across agent counts."""
    print(f"{'agents':>6} {'batched ops':>12} {'naive ops':>10} {'naive/batched':>14}")
    for r in rows:
        print(f"{r['agents']:>6} {r['batched_ops']:>12} {r['naive_ops']:>10} {r['ratio']:>13.1f}x", flush=True)
    counts = [r["batched_ops"] for r in rows]
    print(f"batched: {min(counts)}-{max(counts)} ops, {100 * (max(counts) / min(counts) - 1):.1f}% apart")


def bench_toggles(n: int, batch: int, hidden: int, repeats: int) -> list[tuple[str, str, float, float]]:
    """(toggle, unit, off, on) for each optimisation, measured back to back."""
    rows = []
    agents, data, noise, next_noise = setup(n, batch, hidden)
    base = median_time(batched_update(agents, data, noise, next_noise), repeats)
    rows.append(
        (
            "amp (bf16 autocast)",
            "update ms",
            1000 * base,
            1000 * median_time(batched_update(agents, data, noise, next_noise, amp=True), repeats),
        )
    )
    compiled = batched_update(
        agents, data, noise, next_noise, runner=torch.compile(functools.partial(masac_loss, agents))
    )
    compiled()  # compilation, not timed
    rows.append(("optim.compile", "update ms", 1000 * base, 1000 * median_time(compiled, repeats)))
    shapes = {
        "obs": data.obs.shape[1:],
        "state": data.state.shape[1:],
        "action": data.action.shape[1:],
        "reward": data.reward.shape[1:],
        "next_obs": data.obs.shape[1:],
        "next_state": data.state.shape[1:],
        "done": (),
    }
    times = []
    for prioritized in (False, True):
        buffer = ReplayBuffer(100_000, shapes, torch.device("cpu"), prioritized=prioritized)
        for _ in range(100):
            buffer.add(**{name: torch.randn(1000, *shape) for name, shape in shapes.items()})
        g = torch.Generator().manual_seed(0)

        def sample_and_update() -> None:
            sampled = buffer.sample(batch, g)
            buffer.update_priorities(sampled.index, torch.rand(batch))

        times.append(1000 * median_time(sample_and_update, repeats))
    rows.append(("algorithm.prioritized (100k buffer: sample + priority update)", "ms", *times))
    for size in (batch // 2, batch * 2, batch * 4):
        agents, data, noise, next_noise = setup(n, size, hidden)
        t = median_time(batched_update(agents, data, noise, next_noise), repeats)
        rows.append((f"hardware.batch_size {batch} -> {size}", "samples/s", batch / base, size / t))
    return rows


def bench_prefetch(batch: int, repeats: int, device: torch.device) -> tuple[float, float]:
    """Training steps/s (collect, batch from a host replay buffer, update) with ``optim.prefetch`` off and on:
    the real ``Experience`` workload and ``MASACAgents`` on ``device``, default 4-UAV env."""
    rates = []
    for prefetch in ("false", "true"):
        cfg = compose_config(
            [
                "algorithm=masac",
                "hardware.data_on_device=false",
                "hardware.pin_memory=true",
                f"optim.prefetch={prefetch}",
                "algorithm.learning_starts=0",
                "env.n_envs=16",
            ]
        )
        agents = make_model(cfg).to(device)
        work = make_algorithm(cfg, device).workload(agents)
        step = iter(range(10**9))
        noise, next_noise = torch.randn(2, agents.s.n_agents, batch, 2, device=device).unbind(0)
        update = batched_update(agents, None, noise, next_noise, next_data=lambda: work.batch(next(step), 0, batch))
        steps = 20

        def train() -> None:
            for _ in range(steps):
                update()
            if device.type == "cuda":
                torch.cuda.synchronize()

        rates.append(steps / median_time(train, repeats, warmup=1))
    return rates[0], rates[1]


def bench_env(n_envs: int, n_uav: int, repeats: int, device: torch.device) -> dict[str, float]:
    env = UAVEnv(EnvSettings(n_uav=n_uav), SceneDistribution(), n_envs, device, seed=0)
    env.reset()
    steps = 5

    def run() -> None:
        for _ in range(steps):
            env.step(random_policy(env))
        if device.type == "cuda":
            torch.cuda.synchronize()

    t = median_time(run, repeats, warmup=1)
    return {"envs": n_envs, "uavs": n_uav, "agent_steps_per_s": steps * n_envs * n_uav / t}


def bench_vmas(n_envs: int, n_uav: int, repeats: int, device: torch.device, max_step_s: float) -> float | None:
    """Agent-steps/s of VMAS's discovery scenario with random actions; None when one step is too slow."""
    import vmas  # optional: the cross-check needs it, nothing else does

    env = vmas.make_env("discovery", num_envs=n_envs, device=device, continuous_actions=True, n_agents=n_uav, seed=0)
    env.reset()
    steps = 5

    def step() -> None:
        env.step([torch.rand(n_envs, 2, device=device) * 2 - 1 for _ in range(n_uav)])

    start = time.perf_counter()
    step()
    if time.perf_counter() - start > max_step_s:
        return None

    def run() -> None:
        for _ in range(steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()

    return steps * n_envs * n_uav / median_time(run, repeats, warmup=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--section", choices=["update", "toggles", "env", "ops", "all"], default="all")
    parser.add_argument("--agents", type=int, nargs="+", default=[2, 4, 16, 64])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 64, 1024, 16384])
    parser.add_argument("--uavs", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--max-agent-steps", type=int, default=2_000_000, help="skip env sizes E x N above this")
    parser.add_argument("--vmas", action="store_true", help="also VMAS's discovery scenario (pip install vmas)")
    parser.add_argument("--vmas-max-step-s", type=float, default=2.0, help="skip VMAS sizes slower than this a step")
    args = parser.parse_args()
    if args.vmas and importlib.util.find_spec("vmas") is None:
        parser.error("--vmas needs VMAS, an optional cross-check: pip install vmas")
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}")
    if args.section in ("update", "all"):
        print(f"\nMASAC update, batch {args.batch}, hidden {args.hidden}, median of {args.repeats}")
        print(f"{'agents':>6} {'batched ms':>11} {'naive ms':>10} {'speedup':>8}")
        for n in args.agents:
            r = bench_update(n, args.batch, args.hidden, args.repeats if n < 64 else max(3, args.repeats // 2))
            print(f"{r['agents']:>6} {r['batched_ms']:>11.1f} {r['naive_ms']:>10.1f} {r['speedup']:>7.1f}x", flush=True)
    if args.section in ("ops", "all"):
        print("\nMASAC aten ops per update (forward, backward, optimiser step, target averaging)")
        print_ops([bench_ops(n) for n in args.agents])
    if args.section in ("toggles", "all"):
        print(
            f"\nToggles, 4 agents, batch {args.batch}, hidden {args.hidden}, median of {args.repeats} "
            "(prefetch moves the copy off the critical path only on CUDA; on a CPU there is no copy)"
        )
        print(f"{'toggle':<62} {'unit':>10} {'off':>10} {'on':>10} {'ratio':>6}")
        for name, unit, off, on in bench_toggles(4, args.batch, args.hidden, args.repeats):
            print(f"{name:<62} {unit:>10} {off:>10.1f} {on:>10.1f} {on / off:>6.2f}", flush=True)
        off, on = bench_prefetch(args.batch, args.repeats, torch.device(args.device))
        print(
            f"{'optim.prefetch (host buffer, default env and networks)':<62} {'steps/s':>10} {off:>10.1f} "
            f"{on:>10.1f} {on / off:>6.2f}",
            flush=True,
        )
    if args.section in ("env", "all"):
        print(
            f"\nUAVEnv.step, random actions, agent-steps/s (median of {args.repeats} x 5 steps)"
            + (" | VMAS discovery" if args.vmas else "")
        )
        print(f"{'envs':>6} " + " ".join(f"{f'N={n}':>12}" for n in args.uavs))
        for e in args.envs:
            cells = []
            for n in args.uavs:
                if e * n > args.max_agent_steps:
                    cells.append(f"{'-':>12}")
                    continue
                r = bench_env(e, n, args.repeats, torch.device(args.device))
                cells.append(f"{r['agent_steps_per_s']:>12,.0f}")
                if args.vmas:
                    v = bench_vmas(e, n, args.repeats, torch.device(args.device), args.vmas_max_step_s)
                    cells[-1] += f" | {'-' if v is None else f'{v:,.0f}':>9}"
            print(f"{e:>6} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
