"""A sweep compared in TensorBoard: ``mode=compare``'s log directory served by TensorBoard itself and read in
headless Chromium, as a user without an account looks at it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

from browser import DevTools
from conftest import make_run
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams.api_pb2 import DataType
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

from uavgnn.modes.compare import compare_paths
from uavgnn.runs.layout import COMPARISON_TENSORBOARD

# (job, model, hidden, seed, best validation gap): two models, two seeds each, as `-m model=tiny,small seed=0,1`
JOBS = [
    ("0", "tiny", 32, 0, 0.10),
    ("1", "tiny", 32, 1, 0.20),
    ("2", "small", 64, 0, 0.04),
    ("3", "small", 64, 1, 0.06),
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serving(url: str, server: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            assert server.poll() is None, f"tensorboard exited: {server.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, f"tensorboard did not serve {url} within {timeout:.0f} s"
            time.sleep(0.5)


def test_a_sweep_in_tensorboards_hparams_view_in_chromium(tmp_path) -> None:
    """TensorBoard's HParams table shows the swept keys as its only hyperparameter columns (not the config's
    constants), one row per run named as the report names it, and the final gaps in percent as the report shows
    them (the runs' recorded fractions x 100)."""
    sweep = tmp_path / "sweep"
    for job, model, hidden, seed, gap in JOBS:
        make_run(sweep, job, model, hidden, seed, gap, overrides=["experiment=debug", f"model={model}", f"seed={seed}"])
    (sweep / "multirun.yaml").write_text("{}")
    compare_paths([sweep], sweep)
    logdir = sweep / COMPARISON_TENSORBOARD
    names = [f"model={model}, seed {seed}" for _, model, _, seed, _ in JOBS]
    assert sorted(p.name for p in logdir.iterdir()) == sorted(names)  # a run each, nothing else (no run ".")
    view = EventAccumulator(str(logdir / names[0])).Reload().PluginTagToContent("hparams")
    infos = HParamsPluginData.FromString(view["_hparams_/experiment"]).experiment.hparam_infos
    kinds = {info.name: (info.type, list(info.domain_discrete.values)) for info in infos}
    assert kinds["seed"][0] == DataType.DATA_TYPE_FLOAT64 and [v.number_value for v in kinds["seed"][1]] == [0, 1]
    assert kinds["model"][0] == DataType.DATA_TYPE_STRING  # each column filters and sorts by its own kind
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir)]
        + ["--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    browser = None
    try:
        serving(f"http://127.0.0.1:{port}/", server)
        browser = DevTools(tmp_path)
        browser.open(f"http://127.0.0.1:{port}/#hparams")
        shown = browser.wait_for_text(["Hyperparameters", "Metrics", *names])
    finally:
        if browser is not None:
            browser.close()
        server.terminate()
        server.wait(timeout=30)
    columns = shown[shown.index("Hyperparameters") + 1 : shown.index("Metrics")]
    # the swept keys alone (not model.hidden, data.cache_dir, train.steps...), each with its values to filter by
    assert columns == ["model", "small", "tiny", "seed", "0.0000", "1.0000"]
    metrics = shown[shown.index("Metrics") + 1 : shown.index("Status")]
    assert "best val. gap to the MILP (%)" in metrics and "test gap to the MILP (%)" in metrics
    for name, (_, model, _, seed, gap) in zip(names, JOBS):
        row = shown[shown.index(name) + 1 :][:8]
        assert row[0] == model and float(row[1]) == seed, row
        numbers = [float(cell) for cell in row[2:] if cell.replace(".", "", 1).isdigit()]
        assert any(abs(n - 100 * gap) < 1e-3 for n in numbers), (name, row)  # best val. gap, in percent
        assert any(abs(n - 100 * (gap + 0.01)) < 1e-3 for n in numbers), (name, row)  # test gap, in percent
