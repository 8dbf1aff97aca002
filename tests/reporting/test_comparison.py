"""mode=compare: exact values from synthetic run directories, a real sweep, and the page in Chromium."""

from __future__ import annotations

import csv
import html
import json
import math
import re
import shutil
import statistics
import subprocess
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import scipy.stats
from browser import chromium, chromium_flags
from conftest import make_run, run_cli
from omegaconf import OmegaConf

from uavgnn.algorithms.compared import metrics_of
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.modes.compare import compare_paths
from uavgnn.reporting.comparison import differing_keys, group_labels
from uavgnn.reporting.intervals import ci95, iqm, mean_interval, stratified_bootstrap
from uavgnn.runs.record import find_runs, load_run


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


def test_a_resumed_and_a_fresh_seed_of_one_config_are_one_group(tmp_path) -> None:
    """How a run was continued, logged or fed does not define it (``uavgnn.runs.identity``): seed 1, resumed after a
    stop with another logger and more threads, is averaged with seed 0 as one config."""
    root = tmp_path / "sweep"
    make_run(root, "0", "tiny", 32, 0, 0.10, resume="false", logger={"name": "wandb"}, hardware={"threads": 1})
    make_run(root, "1", "tiny", 32, 1, 0.20, resume="auto", logger={"name": "jsonl"}, hardware={"threads": 2})
    rows, text = compare_paths([root], root)
    means = [row for row in rows if str(row["run"]).startswith("mean")]
    assert len(means) == 1 and means[0]["best_val_optimality_gap"] == pytest.approx(0.15)
    assert {row["group"] for row in rows} == {0} and "resume" not in rows[0] and "hardware.threads" not in rows[0]


def test_table_values_aggregates_and_failures(sweep) -> None:
    rows, text = compare_paths([sweep], sweep)
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
    # 2 seeds: their range, labelled as such (no 95% interval: t would read [-48%, 78%])
    assert (tiny["best_val_optimality_gap_ci_low"], tiny["best_val_optimality_gap_ci_high"]) == (0.10, 0.20)
    assert tiny["best_val_optimality_gap_ci"] == "range"
    markdown = (sweep / "comparison.md").read_text()
    header = markdown.splitlines()[0]
    assert "seed group" in header and "best val. gap to the MILP (%) ↓" in header and "graphs/s ↑" in header
    assert "model.name" not in header and "data.cache_dir" not in header  # the group's name says what differs
    lines = {line.split("|")[1].strip(): line for line in markdown.splitlines()[2:] if line.startswith("|")}
    assert list(lines) == ["model.hidden=32, model.name=tiny", "model.hidden=64, model.name=small"]  # means only
    # gaps in percent, mean ± std (sample std: 1.41 and 7.07 points); best on the group means (small's 5%, not
    # run 2's 4%); ties all bold
    small, tiny_line = lines["model.hidden=64, model.name=small"], lines["model.hidden=32, model.name=tiny"]
    assert "**5.00 ± 1.41 [min 4.00, max 6.00]**" in small and "**4.00" not in markdown
    assert " 15.00 ± 7.07 [min 10.00, max 20.00] |" in tiny_line
    assert markdown.count("**90.00 ± 0.00 [min 90.00, max 90.00]**") == 2
    assert (
        "[min, max]: the seeds' range, too few seeds for a 95% interval" in markdown
        and "95% interval of" not in markdown
    )
    assert "Failed runs:" in markdown and "- 4: ConfigError: model.hidden=-1 must be > 0" in markdown
    assert "15.00 ± 7.07 [min 10.00, max 20.00]" in " ".join(text.split()) and "Failed runs:" in text  # console
    with (sweep / "comparison.csv").open() as f:
        table = list(csv.DictReader(f))
    # each seed group's runs, then its mean row; values as recorded (fractions)
    assert [r["run"] for r in table] == ["0", "1", "mean ± std (2 seeds)", "2", "3", "mean ± std (2 seeds)", "4"]
    assert float(table[3]["test/optimality_gap"]) == pytest.approx(0.05)
    assert float(table[5]["test/optimality_gap_ci_high"]) == pytest.approx(0.07)
    image = matplotlib.image.imread(sweep / "comparison.png")
    assert image.shape[0] > 100 and image.std() > 0.01
    page = (sweep / "comparison.html").read_text()
    assert "data:image/png;base64," in page and page.count("<tr class=") == len(rows)
    assert "5.00 ± 1.41<br><small>[min 4.00, max 6.00]</small>" in page  # every run and mean in the record


def test_latex_is_booktabs_with_percent_seed_means_and_valid_intervals(sweep, tmp_path) -> None:
    """comparison.tex is a table a paper can take as it is (not left-aligned numbers, rows named by run directory,
    per-seed rows, raw metric names, gaps as fractions or, with 2 seeds, a gap's interval below zero): a table
    float with caption and label, booktabs rules, numbers right-aligned, one row per seed group named by what it
    shares, its interval on the line below; rendered by pdflatex where one is installed."""
    make_run(sweep, "5", "small", 64, 2, 0.002, speed=90)  # small: 3 seeds, a gap near 0: t would leave [0, inf)
    compare_paths([sweep], sweep)
    latex = (sweep / "comparison.tex").read_text().splitlines()
    assert latex[:3] == [r"% needs \usepackage{booktabs}", r"\begin{table}[t]", r"\centering"]
    assert latex[3].startswith(r"\caption{Each seed group's mean $\pm$ std over its 2-3 seeds (n)")
    assert "percent" in latex[3] and "bold: the best." in latex[3]
    assert latex[4:7] == [r"\label{tab:comparison}", r"\begin{tabular}{lrrrrrrr}", r"\toprule"]
    assert latex[-3:] == [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    head, body = latex[7:9], latex[10:-3]
    assert latex[9] == r"\midrule" and all(line.count("&") == 7 and line.endswith(r"\\") for line in head + body)
    assert head[0].startswith("seed group & n & best val. gap to") and r"the MILP (\%) $\downarrow$" in head[1]
    cells = [[c.strip() for c in line.removesuffix(r"\\").split("&")] for line in body]
    assert [c[0] for c in cells] == ["model.hidden=32, model.name=tiny", "", "model.hidden=64, model.name=small", ""]
    assert cells[0][1:4] == ["2", r"15.00 $\pm$ 7.07", r"16.00 $\pm$ 7.07"] and cells[1][2] == "[min 10.00, max 20.00]"
    small_gap = 100 * statistics.mean([0.04, 0.06, 0.002])
    small_std = 100 * statistics.stdev([0.04, 0.06, 0.002])
    assert cells[2][2] == rf"\textbf{{{small_gap:.2f} $\pm$ {small_std:.2f}}}"  # the best mean in bold, in percent
    # t would read [-2.5%, 9.2%]; the bootstrap of 3 seeds lands on their extremes: the range, said so
    assert cells[3][2] == "[min 0.20, max 6.00]" and "the seeds' range" in latex[3]
    assert cells[3][5] == "[90.00, 90.00]"  # completion, 3 seeds alike: t, inside [0, 100%]
    if shutil.which("pdflatex"):
        (tmp_path / "doc.tex").write_text(
            "\\documentclass{article}\\usepackage{booktabs}\\begin{document}"
            f"\\input{{{sweep / 'comparison.tex'}}}\\end{{document}}"
        )
        done = subprocess.run(
            ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout[-2000:]


def test_options_pick_metrics_show_runs_and_choose_the_interval(sweep) -> None:
    """compare.metrics, compare.seed_means=false and compare.interval=t (never an interval outside the range)."""
    make_run(sweep, "5", "small", 64, 2, 0.002, speed=90)
    rows, _ = compare_paths(
        [sweep], sweep, metrics=["test/optimality_gap", "graphs_per_s"], seed_means=False, interval="t"
    )
    markdown = (sweep / "comparison.md").read_text()
    header = markdown.splitlines()[0]
    assert [c.strip() for c in header.split("|")[3:6]] == ["test gap to the MILP (%) ↓", "graphs/s ↑", ""]
    names = [line.split("|")[1].strip() for line in markdown.splitlines()[2:] if line.startswith("| ")]
    assert names == [
        "model.hidden=32, model.name=tiny, seed 0",
        "model.hidden=32, model.name=tiny, seed 1",
        "model.hidden=32, model.name=tiny",
        "model.hidden=64, model.name=small, seed 0",
        "model.hidden=64, model.name=small, seed 1",
        "model.hidden=64, model.name=small, seed 2",
        "model.hidden=64, model.name=small",
    ]
    latex = (sweep / "comparison.tex").read_text()
    assert "Each run, then each seed group's mean" in latex and "\nrun & n & test gap to & graphs/s \\\\\n" in latex
    assert "model.hidden=64, model.name=small, seed 2 & 1 & " in latex
    means = [r for r in rows if r["run"].startswith("mean ± std")]
    # 2 seeds: their range whatever the method (t over 2 seeds would leave a gap's range: below 0)
    assert means[0]["test/optimality_gap_ci"] == "range" and means[0]["test/optimality_gap_ci_low"] == 0.11
    assert means[0]["graphs_per_s_ci"] == "range"
    assert means[1]["test/optimality_gap_ci"] == "n/a"  # 3 seeds, a gap near 0: t leaves [0, inf)
    assert means[1]["graphs_per_s_ci"] == "t"  # 90, 70 and 100 graphs/s: [48.7, 124.6]
    assert means[1]["graphs_per_s_ci_low"] == pytest.approx(260 / 3 - ci95(statistics.stdev([90, 70, 100]), 3))
    assert "[n/a]" in markdown
    with pytest.raises(ConfigError, match="compare.metrics: test/return not among"):
        compare_paths([sweep], sweep, metrics=["test/return"])


def test_one_group_is_compared_with_nothing_so_nothing_is_bold(tmp_path) -> None:
    """A sweep of seeds alone is one group: its mean ± std and its two seeds' range, labelled as the range it is,
    and no cell marked best in any form (there is nothing to be best among)."""
    root = tmp_path / "seeds"
    make_run(root, "0", "tiny", 32, 0, 0.10)
    make_run(root, "1", "tiny", 32, 1, 0.20)
    _, text = compare_paths([root], root)
    markdown, latex = (root / "comparison.md").read_text(), (root / "comparison.tex").read_text()
    page = (root / "comparison.html").read_text()
    assert "**" not in markdown and r"\textbf" not in latex and "class='best'" not in page
    assert "bold: the best." not in latex
    assert "15.00 ± 7.07 [min 10.00, max 20.00]" in markdown and "15.00 ± 7.07 [min 10.00, max 20.00]" in text
    assert "95% interval" not in markdown.split("[min 10.00")[1].split("|")[0]  # the cell: a range, said so


def test_intervals_stay_inside_a_metrics_range() -> None:
    bounds = (0.0, math.inf)
    assert mean_interval([0.3], bounds) is None  # one seed: n/a
    for method in ("auto", "t", "bootstrap"):  # two seeds: their range, never called a 95% interval
        two = mean_interval([0.09, 0.01], bounds, method)
        assert (two.low, two.high, two.method) == (0.01, 0.09, "range")
    near_zero = [0.001, 0.002, 0.05]
    assert mean_interval(near_zero, bounds, "t") is None  # t would read [-0.06, 0.10]
    boot = mean_interval(near_zero, bounds)  # 3 values: each extreme 1/27 of the resamples, the percentiles on them
    assert (boot.low, boot.high, boot.method) == (0.001, 0.05, "range")
    boot = mean_interval([*near_zero, 0.003], bounds)  # 4: each extreme 1/256, inside the 2.5% tails
    assert boot.method == "bootstrap" and 0.001 < boot.low < boot.high < 0.05
    wide = [0.40, 0.42, 0.45, 0.41]
    inside = mean_interval(wide, bounds)
    half = ci95(statistics.stdev(wide), 4)
    assert inside.method == "t" and inside.low == pytest.approx(statistics.mean(wide) - half)
    assert mean_interval(wide, bounds, "bootstrap").method == "bootstrap"
    assert mean_interval([0.98, 0.99, 1.0], (0.0, 1.0)).method == "range"  # a share: t would pass 100%; 3 values


def test_iqm_and_stratified_bootstrap_are_rliables() -> None:
    """The IQM is scipy's trim_mean(x, 0.25) (rliable's aggregate_iqm); the bootstrap resamples runs within each
    task: two tasks whose runs all score 0 and 1 give an IQM of 0.5 in every resample (unstratified, it would
    not)."""
    scores = np.array([3.0, 9.0, 1.0, 4.0, 7.0, 2.0, 8.0, 100.0])
    assert iqm(scores) == pytest.approx(scipy.stats.trim_mean(scores, 0.25)) and iqm(scores) == 5.5
    assert iqm(np.array([1.0, 2.0, 30.0])) == pytest.approx(11.0)  # int(0.75) = 0 cut: the mean
    point, interval = stratified_bootstrap([[0.0, 0.0], [1.0, 1.0]])
    assert (point, interval.low, interval.high) == (0.5, 0.5, 0.5)
    point, interval = stratified_bootstrap([[0.1, 0.3, 0.2, 0.9]])
    assert point == pytest.approx(0.25) and 0.1 <= interval.low < point < interval.high <= 0.9


def test_groups_are_labelled_by_the_overrides_the_user_typed(sweep) -> None:
    """The legend of comparison.png and the groups read ``model=tiny`` (what was typed), not every config key
    that option sets; without overrides on record, the differing config keys."""
    runs = [load_run(d) for d in find_runs([sweep])]
    keys = differing_keys(runs)
    assert group_labels(runs, keys)[0] == "model.hidden=32, model.name=tiny"
    for run, model in zip(runs, ["tiny", "tiny", "small", "small", "small"]):
        OmegaConf.save(
            [f"model={model}", f"seed={run.config['seed']}", "logger=jsonl"],
            run.directory / ".hydra" / "overrides.yaml",
        )
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
    """Columns sniffed from summary keys would guess wrong (a planner gap and no optimality gap: the environment
    policies'; anything else, a dynamics model's runs too, the assignment policies', every cell empty). The
    algorithm on each run's record says (``Algorithm.compared``): runs of several algorithms show each one's
    columns and curves, in the order of the runs, each figure best in its own direction; an algorithm that is
    not registered here adds none."""
    scene = make_run(tmp_path, "scene", "tiny", 32, 0, 0.1)  # no algorithm on record: the default's
    env = recorded_run(
        tmp_path,
        "env",
        {"seed": 0, "algorithm": {"name": "masac"}},
        {"best_val_planner_gap": 0.3, "test/of_planner": 0.7},
        [{"step": 4, "perf/env_steps_per_s": 40.0, "val/return": 1.0}],
    )
    tcn = [
        recorded_run(
            tmp_path,
            f"tcn{i}",
            {"seed": 0, "algorithm": {"name": "dynamics"}, "model": {"hidden": width}},
            {"best_val_k_step_rmse": rmse, "test/test/vs_constant_velocity": removed},
            [{"step": 2, "perf/samples_per_s": speed}, {"step": 4, "perf/samples_per_s": speed + 20}],
        )
        for i, (width, rmse, removed, speed) in enumerate([(8, 0.5, 0.3, 50.0), (16, 0.4, 0.2, 70.0)])
    ]
    gone = recorded_run(tmp_path, "gone", {"seed": 0, "algorithm": {"name": "retired"}}, {"best_val_loss": 1.0}, [])
    runs = [load_run(d) for d in (scene, env, *tcn, gone)]
    metrics = metrics_of(runs)
    assert list(metrics.final) == [
        "best_val_optimality_gap",
        "test/optimality_gap",
        "test/reward",
        "test/completion_score",
        "graphs_per_s",
        "peak_mem_mb",
        "best_val_planner_gap",
        "test/of_planner",
        "test/return",
        "test/completion_rate",
        "test/collisions",
        "env_steps_per_s",
        "best_val_k_step_rmse",
        "test/test/k_step_rmse",
        "test/test_ood/k_step_rmse",
        "test/test/vs_constant_velocity",
        "test/test/disturbance_rmse",
        "samples_per_s",
    ]
    assert [c.key for c in metrics.curves] == ["val/optimality_gap", "val/return", "val/k_step_rmse"]
    assert [c.key for c in metrics.speeds] == ["perf/graphs_per_s", "perf/env_steps_per_s", "perf/samples_per_s"]
    assert metrics_of(runs[-1:]) == metrics_of(runs[:1])  # no registered algorithm on record: the default's
    rows, _ = compare_paths([scene, env, *tcn, gone], tmp_path / "report")
    by_run = {row["run"]: row for row in rows}
    assert by_run["tcn0"]["samples_per_s"] == 60.0 and by_run["tcn1"]["samples_per_s"] == 80.0  # medians
    markdown = (tmp_path / "report" / "comparison.md").read_text()
    line = {width: row for row in markdown.splitlines() for width in ("8", "16") if f"model.hidden={width}," in row}
    assert "**0.4000**" in line["16"] and "**0.5000**" not in line["8"]  # the lower k-step error
    assert "**30.00**" in line["8"] and "**20.00**" not in line["16"]  # the larger share of the error removed (%)


@pytest.mark.slow
def test_list_of_run_directories(tmp_path) -> None:
    a = make_run(tmp_path, "a", "tiny", 32, 0, 0.1)
    b = make_run(tmp_path, "b", "tiny", 32, 0, 0.3)
    out = tmp_path / "report"
    run_cli("mode=compare", f"path=[{a},{b}]", f"hydra.run.dir={out}", cwd=tmp_path)
    assert (out / "comparison.md").exists()
    assert differing_keys([load_run(a), load_run(b)]) == []


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


def test_every_header_sorts_the_table_in_chromium(sweep, tmp_path) -> None:
    compare_paths([sweep], sweep)
    harness = tmp_path / "harness.html"
    harness.write_text(CLICK_HARNESS.replace("PAGE", f"file://{sweep / 'comparison.html'}"))
    dom = subprocess.run(
        [
            chromium(),
            *chromium_flags(tmp_path),
            "--allow-file-access-from-files",
            "--virtual-time-budget=3000",
            "--dump-dom",
            f"file://{harness}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r'<pre id="log">(.*?)</pre>', dom.stdout, re.S)
    assert found and found.group(1), dom.stderr[-2000:]
    clicks = json.loads(html.unescape(found.group(1)))
    assert len(clicks) == 2 * 10  # run, seed group, seed, status and the 6 metrics
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
    by_gap = [c for c in clicks if c["col"] == 4]  # best_val_optimality_gap, worked by hand from the fixture:
    mean = "mean ± std (2 seeds)"  # small (0.04, 0.06; mean 0.05) < tiny (0.10, 0.20; mean 0.15) < failed run 4
    assert [r[2] for r in by_gap[0]["rows"]] == ["2", "3", mean, "0", "1", mean, "4"]
    assert [r[2] for r in by_gap[1]["rows"]] == ["1", "0", mean, "3", "2", mean, "4"]


@pytest.mark.heavy  # a sweep and a headless browser: ~19 s; `pytest -m heavy` runs it
def test_sweep_then_compare_renders_in_chromium(tmp_path) -> None:
    sweep = tmp_path / "multirun"
    run_cli(
        "-m",
        "experiment=debug",
        "model=tiny,small",
        "seed=0,1",
        "logger=jsonl",
        "data.n_uav=6",
        "data.train_scenes=32",
        "data.val_scenes=8",
        "data.test_scenes=8",
        "hardware.batch_size=8",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    proc = run_cli("mode=compare", f"path={sweep}", f"hydra.run.dir={tmp_path / 'cmp'}", cwd=tmp_path)
    printed = [line.split()[0] for line in proc.stdout.splitlines() if line.startswith("model=")]
    assert printed[:2] == ["model=tiny", "model=small"]  # a row per seed group (its mean), named as typed
    for name in ("comparison.md", "comparison.csv", "comparison.png", "comparison.html"):
        assert (sweep / name).exists(), name
    header = (sweep / "comparison.md").read_text().splitlines()[0]
    assert header.split("|")[1].strip() == "seed group" and "test gap to the MILP (%) ↓" in header

    flags = chromium_flags(tmp_path)
    page = f"file://{sweep / 'comparison.html'}"
    dom = subprocess.run(
        [chromium(), *flags, "--virtual-time-budget=3000", "--dump-dom", page],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert 'data-images-loaded="true"' in dom.stdout, dom.stderr[-2000:]
    assert dom.stdout.count("<tr class=") == 6  # 4 runs + 2 seed aggregates
    console = [line for line in dom.stderr.splitlines() if "CONSOLE(" in line or "Uncaught" in line]
    assert console == [], console  # the page logs nothing, so any console line is an error
    shot = tmp_path / "page.png"
    subprocess.run([chromium(), *flags, f"--screenshot={shot}", page], capture_output=True, text=True, timeout=120)
    image = matplotlib.image.imread(shot)
    assert image.shape[:2] == (1200, 1400) and image[..., :3].std() > 0.05  # not blank


@pytest.mark.slow
def test_compare_lists_damaged_runs_instead_of_failing(tmp_path, finished_run) -> None:
    """A truncated summary.json, a summary.json of [], a torn middle line of metrics.jsonl and a broken
    .hydra/config.yaml are each listed as a damaged run, naming what is wrong, and the rest compared: never a
    traceback in mode=compare."""
    sweep = tmp_path / "sweep"
    for name in "abcde":
        shutil.copytree(finished_run / "run", sweep / name)
    (sweep / "a" / "summary.json").write_text((finished_run / "run" / "summary.json").read_text()[:40])
    (sweep / "b" / "summary.json").write_text("[]")
    lines = (sweep / "c" / "metrics.jsonl").read_text().splitlines()
    (sweep / "c" / "metrics.jsonl").write_text("\n".join([lines[0], lines[1][:15], *lines[2:]]) + "\n")
    (sweep / "d" / ".hydra" / "config.yaml").write_text("model: [unclosed\n")
    proc = run_cli("mode=compare", f"path={sweep}", f"hydra.run.dir={tmp_path / 'cmp'}", cwd=tmp_path)
    assert "Traceback" not in proc.stderr
    damaged = {line.split()[1] for line in proc.stderr.splitlines() if "is damaged:" in line}
    assert damaged == {"a", "b", "c", "d"}
    report = (sweep / "comparison.md").read_text()
    assert "Damaged runs:" in report and "- b: summary.json: expected a JSON object" in report
    assert "line 2 is not a JSON object" in report and "config.yaml" in report
