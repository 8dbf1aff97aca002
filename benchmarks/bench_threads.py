"""The main job's training speed alone and beside busy processes, for each ``hardware.threads`` setting (the
default must not collapse when the machine is shared).

    .venv/bin/python benchmarks/bench_threads.py                       # threads 1 (default) and 0 (every core)
    .venv/bin/python benchmarks/bench_threads.py --threads 1 0 --busy 0 1 2 --repeats 3 --out outputs/threads.json

Each measurement runs the main job's imitation phase for real (``run.py algorithm=imitation train.steps=S
logger=none``, the labels cached by a first run) while B busy processes each run a 2-thread torch training loop
(an MLP's forward, backward and Adam step: what a second training run does to the machine). Its figure is the
median ``perf/graphs_per_s`` of the run's log lines after the first two. Settings are interleaved within each
repeat, so a noisy machine slows them alike; medians over the repeats are printed, with each setting's speed
under load as a share of its own idle speed and of the default's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUSY_JOB = """
import torch
torch.set_num_threads(2)
net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
opt = torch.optim.Adam(net.parameters())
x = torch.randn(512, 256)
while True:
    loss = net(x).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()
"""


def main_job_speed(threads: int, busy: int, steps: int, cache: Path, run_dir: Path) -> float:
    """Median training graphs/s of the main job's imitation phase beside ``busy`` 2-thread torch jobs."""
    others = [subprocess.Popen([sys.executable, "-c", BUSY_JOB]) for _ in range(busy)]
    try:
        time.sleep(2.0 if busy else 0.0)  # the busy jobs are running before the measured one starts
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "run.py"),
                "algorithm=imitation",
                f"train.steps={steps}",
                "logger=none",
                f"hardware.threads={threads}",
                f"data.cache_dir={cache}",
                f"hydra.run.dir={run_dir}",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
    finally:
        for other in others:
            other.kill()
            other.wait()
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    speeds = [line["perf/graphs_per_s"] for line in lines if "perf/graphs_per_s" in line]
    return statistics.median(speeds[2:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 0], help="hardware.threads settings")
    parser.add_argument("--busy", type=int, nargs="+", default=[0, 1, 2], help="busy 2-thread jobs beside it")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=ROOT / ".cache" / "uavgnn", help="data.cache_dir")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    speeds: dict[tuple[int, int], list[float]] = {(t, b): [] for t in args.threads for b in args.busy}
    with tempfile.TemporaryDirectory(prefix="bench-threads-") as tmp:
        for repeat in range(args.repeats):
            for busy in args.busy:
                for threads in args.threads:
                    run_dir = Path(tmp) / f"r{repeat}-t{threads}-b{busy}"
                    speed = main_job_speed(threads, busy, args.steps, args.cache, run_dir)
                    speeds[threads, busy].append(speed)
                    print(
                        f"repeat {repeat}: hardware.threads={threads} beside {busy} busy: {speed:.0f} graphs/s",
                        flush=True,
                    )
    median = {key: statistics.median(values) for key, values in speeds.items()}
    default_idle = median[args.threads[0], min(args.busy)]
    print(
        f"\nmedians of {args.repeats} ({args.steps} steps each); share of its own idle speed | of "
        f"hardware.threads={args.threads[0]}'s idle speed"
    )
    for (threads, busy), value in median.items():
        own = value / median[threads, min(args.busy)]
        print(
            f"hardware.threads={threads:<2} beside {busy} busy 2-thread jobs: {value:6.0f} graphs/s  "
            f"{own:6.0%} | {value / default_idle:6.0%}"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {"steps": args.steps, "runs": {f"threads={t} busy={b}": v for (t, b), v in speeds.items()}}, indent=2
            )
        )


if __name__ == "__main__":
    main()
