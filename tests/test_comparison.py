"""mode=compare: exact values from synthetic run directories, a real sweep, and the page in Chromium."""

from __future__ import annotations

import csv
import html
import json
import re
import shutil
import statistics
import subprocess
from pathlib import Path

import matplotlib.image
import pytest
from conftest import run_cli
from omegaconf import OmegaConf

from uavgnn.run_record import find_runs, load_run
from uavgnn.modes.run_metrics import metrics_of
from uavgnn.modes.sweep_report import compare_runs, differing_keys, group_labels


def make_run(root: Path, name: str, model: str, hidden: int, seed: int, gap: float | None, speed: float = 100.0) -> Path:
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create({"seed": seed, "model": {"name": model, "hidden": hidden, "layers": 2},
                                     "data": {"cache_dir": f"/tmp/{name}"}, "train": {"steps": 10}}),
                   run / ".hydra" / "config.yaml")
    history = [{"step": 5, "perf/graphs_per_s": speed, "perf/peak_mem_mb": 10.0},
               {"step": 10, "perf/graphs_per_s": speed + 20, "perf/peak_mem_mb": 12.0, "val/optimality_gap": 0.5}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))
    if gap is None:
        (run / "failed.json").write_text(json.dumps({"error": "ConfigError: model.hidden=-1 must be > 0"}))
    else:
        (run / "summary.json").write_text(json.dumps({"best_val_optimality_gap": gap, "test/optimality_gap": gap + 0.01,
                                                      "test/reward": 10 - gap, "test/completion_score": 0.9}))
    return run


@pytest.fixture
def sweep(tmp_path) -> Path:
    root = tmp_path / "sweep"
    make_run(root, "0", "tiny", 32, 0, 0.10, speed=100)
    make_run(root, "1", "tiny", 32, 1, 0.20, speed=140)
    make_run(root, "2", "small", 64, 0, 0.04, speed=80)
    make_run(root, "3", "small", 64, 1, 0.06, speed=60)
    make_run(root, "4", "small", -1, 0, None)
    (root / "multirun.yaml").write_text("{}")
    return root


def test_table_values_aggregates_and_failures(sweep) -> None:
    rows, _ = compare_runs([sweep], sweep)
    runs = [load_run(d) for d in find_runs([sweep])]
    assert differing_keys(runs) == ["model.hidden", "model.name", "seed"]  # cache_dir differs but is ignored
    by_run = {r["run"]: r for r in rows}
    assert by_run["0"]["best_val_optimality_gap"] == 0.10 and by_run["0"]["graphs_per_s"] == 110.0  # median(100, 120)
    assert by_run["0"]["peak_mem_mb"] == 12.0
    assert by_run["4"]["status"] == "failed" and "model.hidden=-1" in by_run["4"]["error"]
    means = [r for r in rows if r["run"].startswith("mean ± std")]
    assert [m["model.name"] for m in means] == ["tiny", "small"]
    tiny = means[0]
    assert tiny["best_val_optimality_gap"] == pytest.approx(0.15)
    assert tiny["best_val_optimality_gap_std"] == pytest.approx(statistics.stdev([0.10, 0.20]))  # 0.0707
    assert tiny["graphs_per_s"] == pytest.approx(130.0)  # mean of medians 110 (100, 120) and 150 (140, 160)
    markdown = (sweep / "comparison.md").read_text()
    header = markdown.splitlines()[0]
    assert "model.name" in header and "seed" in header and "data.cache_dir" not in header
    # best on the group means (small's 0.05, not run 2's 0.04); the 95% interval: t(0.975, 1 dof) = 12.706
    half = 12.706 * statistics.stdev([0.04, 0.06]) / 2**0.5
    assert f"**0.05 ± 0.014 [{0.05 - half:.4g}, {0.05 + half:.4g}]**" in markdown and "**0.04" not in markdown
    assert markdown.count("**0.9 ± 0 [0.9, 0.9]**") == 2  # a tie: both groups' completion is bold
    assert "0.15 ± 0.071 [" in markdown and "(best)" not in markdown
    latex = (sweep / "comparison.tex").read_text().splitlines()  # the paper table: parsed back
    assert latex[0] == r"\begin{tabular}{llllllllll}" and latex[-1] == r"\end{tabular}"
    body = [line for line in latex if line.endswith(r"\\")]
    assert len(body) == 1 + 6 and all(line.count("&") == 9 for line in body)  # header + the 6 rows that finished
    assert r"best\_val\_optimality\_gap" in body[0] and r"\textbf{0.05 $\pm$ 0.014" in latex[-3]
    assert "Failed runs:" in markdown and "- 4: ConfigError: model.hidden=-1 must be > 0" in markdown
    with (sweep / "comparison.csv").open() as f:
        table = list(csv.DictReader(f))
    # each seed group's runs, then its mean ± std row
    assert [r["run"] for r in table] == ["0", "1", "mean ± std (2 seeds)", "2", "3", "mean ± std (2 seeds)", "4"]
    assert float(table[3]["test/optimality_gap"]) == pytest.approx(0.05)
    image = matplotlib.image.imread(sweep / "comparison.png")
    assert image.shape[0] > 100 and image.std() > 0.01
    page = (sweep / "comparison.html").read_text()
    assert "data:image/png;base64," in page and page.count("<tr class=") == len(rows)


def test_groups_are_labelled_by_the_overrides_the_user_typed(sweep) -> None:
    """The legend of comparison.png and the groups read ``model=tiny`` (what was typed), not every config key
    that option sets; without overrides on record, the differing config keys."""
    runs = [load_run(d) for d in find_runs([sweep])]
    keys = differing_keys(runs)
    assert group_labels(runs, keys)[0] == "model.hidden=32, model.name=tiny"
    for run, model in zip(runs, ["tiny", "tiny", "small", "small", "small"]):
        OmegaConf.save([f"model={model}", f"seed={run.config['seed']}", "logger=jsonl"],
                       run.directory / ".hydra" / "overrides.yaml")
    runs = [load_run(d) for d in find_runs([sweep])]
    # run 4 shares model=small with 2 and 3 but not their config (model.hidden=-1): the overrides cannot tell
    # the groups apart, so the config keys label them
    assert group_labels(runs, keys)[4] == "model.hidden=-1, model.name=small"
    runs = runs[:4]
    assert group_labels(runs, differing_keys(runs)) == ["model=tiny", "model=tiny", "model=small", "model=small"]


def recorded_run(root: Path, name: str, config: dict, summary: dict, history: list[dict]) -> Path:
    """A finished run of any algorithm: its recorded config, ``summary.json`` and history."""
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(config), run / ".hydra" / "config.yaml")
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))
    return run


def test_each_runs_algorithm_says_what_the_comparison_shows(tmp_path) -> None:
    """Issue 63: the columns came from sniffing summary keys (a planner gap and no optimality gap: the environment
    policies'; anything else, a dynamics model's runs too, the assignment policies', every cell empty). Now the
    algorithm on each run's record says (``Algorithm.compared``): runs of several algorithms show each one's
    columns and curves, in the order of the runs, each figure best in its own direction; an algorithm that is
    not registered here adds none."""
    scene = make_run(tmp_path, "scene", "tiny", 32, 0, 0.1)  # no algorithm on record: the default's
    env = recorded_run(tmp_path, "env", {"seed": 0, "algorithm": {"name": "masac"}},
                       {"best_val_planner_gap": 0.3, "test/of_planner": 0.7},
                       [{"step": 4, "perf/env_steps_per_s": 40.0, "val/return": 1.0}])
    tcn = [recorded_run(tmp_path, f"tcn{i}", {"seed": 0, "algorithm": {"name": "dynamics"}, "model": {"hidden": width}},
                        {"best_val_k_step_rmse": rmse, "test/test/vs_constant_velocity": removed},
                        [{"step": 2, "perf/samples_per_s": speed}, {"step": 4, "perf/samples_per_s": speed + 20}])
           for i, (width, rmse, removed, speed) in enumerate([(8, 0.5, 0.3, 50.0), (16, 0.4, 0.2, 70.0)])]
    gone = recorded_run(tmp_path, "gone", {"seed": 0, "algorithm": {"name": "retired"}}, {"best_val_loss": 1.0}, [])
    runs = [load_run(d) for d in (scene, env, *tcn, gone)]
    metrics = metrics_of(runs)
    assert list(metrics.final) == [
        "best_val_optimality_gap", "test/optimality_gap", "test/reward", "test/completion_score", "graphs_per_s",
        "peak_mem_mb", "best_val_planner_gap", "test/of_planner", "test/return", "test/completion_rate",
        "test/collisions", "env_steps_per_s", "best_val_k_step_rmse", "test/test/k_step_rmse",
        "test/test_ood/k_step_rmse", "test/test/vs_constant_velocity", "test/test/disturbance_rmse", "samples_per_s"]
    assert [c.key for c in metrics.curves] == ["val/optimality_gap", "val/return", "val/k_step_rmse"]
    assert [c.key for c in metrics.speeds] == ["perf/graphs_per_s", "perf/env_steps_per_s", "perf/samples_per_s"]
    assert metrics_of(runs[-1:]) == metrics_of(runs[:1])  # no registered algorithm on record: the default's
    rows, _ = compare_runs([scene, env, *tcn, gone], tmp_path / "report")
    by_run = {row["run"]: row for row in rows}
    assert by_run["tcn0"]["samples_per_s"] == 60.0 and by_run["tcn1"]["samples_per_s"] == 80.0  # medians
    markdown = (tmp_path / "report" / "comparison.md").read_text()
    line = {row.split("|")[1].strip(): row for row in markdown.splitlines() if row.startswith("|")}
    assert "**0.4**" in line["tcn1"] and "**0.5**" not in line["tcn0"]  # the lower k-step error
    assert "**0.3**" in line["tcn0"] and "**0.2**" not in line["tcn1"]  # the larger share of the error removed


@pytest.mark.slow
def test_list_of_run_directories(tmp_path) -> None:
    a = make_run(tmp_path, "a", "tiny", 32, 0, 0.1)
    b = make_run(tmp_path, "b", "tiny", 32, 0, 0.3)
    out = tmp_path / "report"
    run_cli("mode=compare", f"path=[{a},{b}]", f"hydra.run.dir={out}", cwd=tmp_path)
    assert (out / "comparison.md").exists()
    assert differing_keys([load_run(a), load_run(b)]) == []


def chromium() -> str:
    """Debian's chromium, installed by ``scripts/setup.sh`` (as root) before the tests run."""
    found = shutil.which("chromium")
    assert found, "chromium is not installed: run `bash scripts/setup.sh` as root, or `apt-get install chromium`"
    return found


# Loads comparison.html in an iframe (same origin under --allow-file-access-from-files), clicks every
# header twice and records, after each click, every row's group, kind, run name and the clicked cell.
CLICK_HARNESS = """<!DOCTYPE html><html><body><iframe id="page" src="PAGE" width="1400" height="900"></iframe>
<pre id="log"></pre><script>
document.getElementById('page').addEventListener('load', () => {
  const table = document.getElementById('page').contentDocument.getElementById('runs');
  const headers = Array.from(table.tHead.rows[0].cells);
  const log = [];
  headers.forEach((th, col) => [0, 1].forEach(() => {
    th.click();
    log.push({col, sort: th.getAttribute('aria-sort'), rows: Array.from(table.tBodies).flatMap(b => Array.from(b.rows)
      .map(r => [b.dataset.group, r.className, r.cells[0].dataset.value, r.cells[col].dataset.value]))});
  }));
  document.getElementById('log').textContent = JSON.stringify(log);
});
</script></body></html>"""
NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def cell_key(text: str) -> float | str | None:
    """A cell as the page compares it: empty -> None, a number -> float, else text."""
    if text == "":
        return None
    return float(text) if NUMBER.fullmatch(text.strip()) else text


def ordered(a, b, direction: int) -> bool:
    """``a`` may precede ``b``: empty cells last either way, numbers before text, then by value."""
    if a is None or b is None:
        return b is None
    if isinstance(a, float) != isinstance(b, float):
        return isinstance(a, float)
    return (a <= b) if direction == 1 else (a >= b)


def chromium_flags(tmp_path: Path) -> list[str]:
    return ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'chrome'}", "--window-size=1400,1200", "--enable-logging=stderr", "--v=0"]


def test_every_header_sorts_the_table_in_chromium(sweep, tmp_path) -> None:
    compare_runs([sweep], sweep)
    harness = tmp_path / "harness.html"
    harness.write_text(CLICK_HARNESS.replace("PAGE", f"file://{sweep / 'comparison.html'}"))
    dom = subprocess.run([chromium(), *chromium_flags(tmp_path), "--allow-file-access-from-files",
                          "--virtual-time-budget=3000", "--dump-dom", f"file://{harness}"],
                         capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="log">(.*?)</pre>', dom.stdout, re.S)
    assert found and found.group(1), dom.stderr[-2000:]
    clicks = json.loads(html.unescape(found.group(1)))
    assert len(clicks) == 2 * 11  # run, model.hidden, model.name, seed, status and the 6 metrics
    for click in clicks:
        direction = 1 if click["sort"] == "ascending" else -1
        groups = [g for g, *_ in click["rows"]]
        blocks = [g for i, g in enumerate(groups) if i == 0 or groups[i - 1] != g]
        assert len(blocks) == len(set(blocks)), click  # each group's rows stay together
        representatives = []
        for group in blocks:
            rows = [r for r in click["rows"] if r[0] == group]
            assert all(kind != "mean" for _, kind, *_ in rows[:-1])  # the mean ± std row closes its group
            runs = [cell_key(value) for _, kind, _, value in rows if kind != "mean"]
            assert all(ordered(a, b, direction) for a, b in zip(runs, runs[1:])), click
            means = [cell_key(value) for _, kind, _, value in rows if kind == "mean"]
            representatives.append(means[0] if means and isinstance(means[0], float) else runs[0])
        assert all(ordered(a, b, direction) for a, b in zip(representatives, representatives[1:])), click
    assert [c["sort"] for c in clicks[:2]] == ["ascending", "descending"]
    by_gap = [c for c in clicks if c["col"] == 5]  # best_val_optimality_gap, worked by hand from the fixture:
    mean = "mean ± std (2 seeds)"  # small (0.04, 0.06; mean 0.05) < tiny (0.10, 0.20; mean 0.15) < failed run 4
    assert [r[2] for r in by_gap[0]["rows"]] == ["2", "3", mean, "0", "1", mean, "4"]
    assert [r[2] for r in by_gap[1]["rows"]] == ["1", "0", mean, "3", "2", mean, "4"]


@pytest.mark.heavy  # a sweep and a headless browser: ~19 s; `pytest -m heavy` runs it
def test_sweep_then_compare_renders_in_chromium(tmp_path) -> None:
    sweep = tmp_path / "multirun"
    run_cli("-m", "experiment=debug", "model=tiny,small", "seed=0,1", "logger=jsonl", "data.n_uav=6",
            "data.train_scenes=32", "data.val_scenes=8", "data.test_scenes=8", "hardware.batch_size=8",
            f"data.cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    proc = run_cli("mode=compare", f"path={sweep}", f"hydra.run.dir={tmp_path / 'cmp'}", cwd=tmp_path)
    assert "mean ± std (2 seeds)" in " ".join(proc.stdout.split())  # the console table may wrap the cell
    for name in ("comparison.md", "comparison.csv", "comparison.png", "comparison.html"):
        assert (sweep / name).exists(), name
    header = (sweep / "comparison.md").read_text().splitlines()[0]
    assert "model.name" in header and "seed" in header

    flags = chromium_flags(tmp_path)
    page = f"file://{sweep / 'comparison.html'}"
    dom = subprocess.run([chromium(), *flags, "--virtual-time-budget=3000", "--dump-dom", page],
                         capture_output=True, text=True, timeout=120)
    assert 'data-images-loaded="true"' in dom.stdout, dom.stderr[-2000:]
    assert dom.stdout.count("<tr class=") == 6  # 4 runs + 2 seed aggregates
    console = [line for line in dom.stderr.splitlines() if "CONSOLE(" in line or "Uncaught" in line]
    assert console == [], console  # the page logs nothing, so any console line is an error
    shot = tmp_path / "page.png"
    subprocess.run([chromium(), *flags, f"--screenshot={shot}", page], capture_output=True, text=True, timeout=120)
    image = matplotlib.image.imread(shot)
    assert image.shape[:2] == (1200, 1400) and image[..., :3].std() > 0.05  # not blank
