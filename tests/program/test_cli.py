"""The command line and the console: the installed program, its help, and what it prints and leaves behind."""

from __future__ import annotations

import io
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
from conftest import ROOT, run_cli
from hydra.conf import HydraConf
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from uavgnn.algorithms.registry import algorithms
from uavgnn.algorithms.scene_policy import first_difference, model_vs_milp_picture
from uavgnn.config.modes import MODES
from uavgnn.evaluation.assignments import Evaluation
from uavgnn.infrastructure.console import count, launched_as, progress
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.loggers.wandb_dashboard import run_id
from uavgnn.modes.cache import clear
from uavgnn.reporting.tables import TABLE_WIDTH, format_table
from uavgnn.runs.directory import continue_command
from uavgnn.runs.layout import WANDB_RUN_ID
from uavgnn.solvers import BASELINES

GROUPS = ("experiment", "algorithm", "model", "hardware", "optim", "task", "env", "curriculum", "logger", "benchmark")


def uavgnn_script() -> str:
    """The console script pip installed next to this interpreter (``bash scripts/setup.sh``)."""
    script = Path(sys.executable).parent / "uavgnn"
    assert script.exists(), f"no console script at {script}: reinstall with `pip install -e .`"
    return str(script)


def test_console_script_help_lists_every_mode_and_group(tmp_path) -> None:
    proc = subprocess.run([uavgnn_script(), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for mode in MODES:  # each with its one-line description
        assert any(line.split()[:1] == [mode] and len(line.split()) > 3 for line in lines), mode
    for group in GROUPS:
        assert any(line.strip().startswith(f"{group} ") for line in lines), group
    assert "-sc install=bash" in proc.stdout  # shell completion, documented where users look
    solve = next(line for line in lines if line.split()[:1] == ["solve"])
    assert all(solver in solve for solver in (*BASELINES, "model", "guided")), solve
    task = next(line for line in lines if line.strip().startswith("task "))
    assert all(option.stem in task for option in (ROOT / "conf" / "task").glob("*.yaml")), task
    assert not (tmp_path / "outputs").exists()
    # every group a user picks from with its options, as shipped (no internal schema groups)
    start = next(i for i, line in enumerate(lines) if line.strip() == "== Options of every group ==")
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].strip())
    listed = {line.split(":")[0].strip(): line.split(":", 1)[1].strip() for line in lines[start + 1 : end]}
    shipped = {
        d.name: ", ".join(sorted(p.stem for p in d.glob("*.yaml")))
        for d in (ROOT / "conf").iterdir()
        if d.is_dir() and d.name not in ("hydra", "__pycache__")
    }
    assert listed == shipped
    # the algorithms: the registry's, each with its module docstring's first line, the default marked, and under
    # each what it declares it can train
    start = lines.index(next(line for line in lines if line.startswith("== Algorithms")))
    block = lines[start + 1 : lines.index("", start)]
    listed, capable = block[::2], [line.strip() for line in block[1::2]]
    assert [line.split()[0] for line in listed] == list(algorithms())
    assert capable == [f"({algorithm.capabilities.describe()})" for algorithm in algorithms().values()]
    coma = capable[list(algorithms()).index("coma")]  # by hand: a shared MLP actor over choices, on-policy
    assert coma.startswith("(model=mlp; env.action=discrete|goto; on-policy; centralised critic")
    choices = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "config.yaml").defaults)
    default = next(choice["algorithm"] for choice in choices if isinstance(choice, dict) and "algorithm" in choice)
    for line, (name, algorithm) in zip(listed, algorithms().items()):
        said = line.split(None, 1)[1].removesuffix("; the default" if name == default else "")
        assert said + "." in sys.modules[algorithm.__module__].__doc__.splitlines()[0], line


@pytest.mark.slow
def test_start_up_imports_neither_matplotlib_nor_scipy_stats(tmp_path) -> None:
    """matplotlib comes with the first picture and a t quantile from ``scipy.special``: together ~1 s of every
    refusal and utility mode's start. The program and every algorithm plug-in imported, neither is loaded."""
    probe = (
        "import sys; from uavgnn.program import cli, job; from uavgnn.algorithms.registry import algorithms; "
        "algorithms(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib' or m == 'scipy.stats'))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout


def test_built_wheel_runs_outside_the_repository(tmp_path) -> None:
    """The wheel carries the configs and the pretrained policy: ``python -m uavgnn`` from it solves a scene
    with ``ckpt=pretrained`` in an empty directory."""
    source = tmp_path / "source"  # a copy: setuptools builds inside the tree it is given
    shutil.copytree(ROOT / "uavgnn", source / "uavgnn", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next((tmp_path / "dist").glob("uavgnn-*.whl"))
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "WANDB_MODE": "offline"}
    where = subprocess.run(
        [sys.executable, "-c", "import uavgnn; print(uavgnn.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.startswith(str(site))  # the installed copy, not this checkout
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "uavgnn",
            "mode=solve",
            "solver=model",
            "ckpt=pretrained",
            "logger=none",
            "hydra.run.dir=solved",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert (work / "solved" / "assignment.json").exists() and (work / "solved" / "run.log").exists()


@pytest.mark.slow
def test_utility_modes_leave_no_empty_run_directory(tmp_path) -> None:
    proc = subprocess.run(
        [uavgnn_script(), "mode=cache", f"data.cache_dir={tmp_path / 'cache'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "no caches in" in proc.stdout, proc.stderr
    assert not (tmp_path / "outputs").exists()


def test_cache_clear_says_what_goes_and_needs_force_off_a_terminal(tmp_path, monkeypatch, capsys) -> None:
    root = tmp_path / "cache"
    for name, size in (("train-n6-0123456789abcdef", 3 * 2**20), ("val-n6-fedcba9876543210", 2**20)):
        (root / name / "sub").mkdir(parents=True)  # sizes count every file below the entry
        (root / name / "sub" / "graphs.pt").write_bytes(b"\0" * size)
        (root / name / ".uavgnn-cache").write_text(name[-16:])  # the marker a build writes: the entry is ours
    (root / "notes").mkdir()  # not a cache: listed as left alone, never deleted
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # not a terminal
    with pytest.raises(ConfigError, match=r"would delete 2 caches \(4.0 MB\) in .*: add force=true"):
        clear(str(root), force=False)
    assert len(list(root.iterdir())) == 3  # nothing deleted
    monkeypatch.setattr(sys, "stdin", type("Tty", (io.StringIO,), {"isatty": lambda self: True})(""))
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    clear(str(root), force=False)
    out = capsys.readouterr().out
    assert "nothing deleted" in out and "left alone in" in out and "(notes)" in out and len(list(root.iterdir())) == 3
    monkeypatch.setattr("builtins.input", lambda prompt: "y")
    clear(str(root), force=False)
    assert [p.name for p in root.iterdir()] == ["notes"] and "removed 2 caches" in capsys.readouterr().out


def test_tables_fit_120_columns_and_keep_every_cell() -> None:
    note = "build 0.68 ms + forward 0.21 ms + decode 0.32 ms per scene, then a repair pass over the conflicts"
    rows = [
        {
            "method": "model (greedy)",
            "per_agent_reward": 1.2777,
            "completion_score": 0.75,
            "optimality_gap": 0.127,
            "wall_time_s": 0.001,
            "note": note,
        },
        {"method": "milp", "note": "optimal"},
    ]
    wide = format_table(rows)
    assert max(map(len, wide.splitlines())) <= TABLE_WIDTH
    assert " ".join(wide.split()).count("per scene") == 1 and "1.278" in wide and "12.70" in wide  # a gap in %
    assert "gap (%)" in " ".join(wide.split())
    narrow = format_table([{"solver": "lap", "reward": 23.41}])
    assert narrow.splitlines()[0].split() == ["solver", "reward"]  # a table that fits keeps one-line headers


def test_counts_read_naturally() -> None:
    assert [count(1, "scene"), count(2, "scene"), count(4000, "UAV")] == ["1 scene", "2 scenes", "4,000 UAVs"]


def test_progress_off_a_terminal_is_plain_status_lines(monkeypatch) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert list(progress(range(3), desc="work")) == [0, 1, 2]
    labelling = progress(total=4, desc="labels", leave=False)
    labelling.update(4)
    labelling.close()
    text = sys.stderr.getvalue()
    assert "\r" not in text and "" not in text.splitlines()  # no redraws, no blank lines
    lines = text.splitlines()  # the start and the end of each (both finished within the 30 s interval)
    assert [line.split("|")[0].split(":")[0] for line in lines] == ["work", "work", "labels", "labels"]
    assert "0/3" in lines[0] and "3/3" in lines[1] and "0/4" in lines[2] and "4/4" in lines[3]


def test_wandb_run_id_is_kept_in_the_run_directory(tmp_path) -> None:
    first = run_id(tmp_path)
    assert (tmp_path / WANDB_RUN_ID).read_text() == first and run_id(tmp_path) == first
    assert len(first) == 8 and first.isalnum() and tmp_path.name not in first


def test_test_scene_picture_shows_a_scene_where_model_and_milp_differ(labelled_store, tmp_path) -> None:
    labels = labelled_store.label_assignments()
    ours = [a.copy() for a in labels]
    ours[3][0] = -1 if ours[3][0] != -1 else 0  # scene 3 is the first where the "model" differs
    assert first_difference(ours, labels) == 3 and first_difference(labels, labels) is None
    evaluation = Evaluation({"optimality_gap": np.linspace(0, 0.3, len(ours))}, ours, 0.0, 0.0)
    path = model_vs_milp_picture(labelled_store, evaluation, "tiny", tmp_path / "test_scene.png")
    image = matplotlib.image.imread(path)
    assert image.shape[1] > 1.5 * image.shape[0] and image[..., :3].std() > 0.05  # two panels side by side


@pytest.mark.parametrize("program, tail", [("run.py", " run.py"), ("uavgnn/__main__.py", " -m uavgnn"), ("uavgnn", "")])
def test_printed_commands_name_the_interpreter_that_runs(monkeypatch, program, tail) -> None:
    """A printed command runs as printed: with this interpreter (a plain ``python`` may be one without the
    dependencies: the README's is ``.venv/bin/python``), by name only where the shell's is this one."""
    bin_dir = Path(sys.executable).parent
    script = ROOT / program if program != "uavgnn" else bin_dir / "uavgnn"
    monkeypatch.setattr(sys, "argv", [str(script), "mode=info"])
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PATH", "/nowhere")  # the virtual environment not activated
    venv = ".venv/bin/python" if Path(sys.executable).is_relative_to(ROOT) else sys.executable
    shown = {"run.py": f"{venv} run.py", "uavgnn/__main__.py": f"{venv} -m uavgnn"}
    local = str(script.relative_to(ROOT)) if script.is_relative_to(ROOT) else str(script)
    assert launched_as() == shown.get(program, local)
    monkeypatch.setenv("PATH", str(bin_dir))  # activated: its python and uavgnn are the shell's
    assert launched_as() == ("python" + tail if tail else "uavgnn")


def test_the_continue_command_passes_every_directory_name_to_hydra_as_it_is(tmp_path, monkeypatch) -> None:
    """A run directory with a space, a quote, a ``$``, an accent or an emoji: shell-quoted (it stays one word)
    and Hydra-quoted where Hydra's grammar needs it (``é`` unquoted is a lexer error); the launch's own overrides
    kept, its ``resume`` and directory replaced."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    monkeypatch.setattr(sys, "argv", [str(ROOT / "run.py")])
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    monkeypatch.chdir(tmp_path)  # the checkout elsewhere: run.py by its full path
    parser = OverridesParser.create()
    for run in (tmp_path / "my runs" / "it's $HOME", tmp_path / "évaluation 🚁", tmp_path / "plain"):
        monkeypatch.setattr(HydraConfig.instance(), "cfg", None)  # outside a Hydra launch: the directory alone
        words = shlex.split(continue_command(run, "resume=auto"))
        assert words[:3] == ["python", str(ROOT / "run.py"), "resume=auto"]
        assert parser.parse_override(words[3]).value() == str(run) and len(words) == 4
        launch = OmegaConf.create({"hydra": OmegaConf.structured(HydraConf)})
        launch.hydra.overrides.task = ["logger.name=first try", "resume=never", f"hydra.run.dir={run}", "train.steps=5"]
        monkeypatch.setattr(HydraConfig.instance(), "cfg", launch)
        words = shlex.split(continue_command(run, "resume=auto"))
        assert words[2:5] == ["logger.name=first try", "train.steps=5", "resume=auto"] and len(words) == 6
        assert parser.parse_override(words[5]).value() == str(run)


# ---------------------------------------------------------------- one error style


@pytest.mark.parametrize(
    "override, line",
    [
        ("modle=small", "modle=small: no group or key 'modle'; did you mean model=small?"),  # the group, not mode
        ("model=smal", "model=smal: no option 'smal' in model; did you mean model=small?"),
        ("train.stpes=3", "train.stpes=3: no key 'train.stpes'; did you mean train.steps=3?"),
        ("modle.hidden=3", "modle.hidden=3: no group or key 'modle'; did you mean model.hidden=3?"),
        ("train.steps=abc", "train.steps=abc: Value 'abc' of type 'str' could not be converted to Integer"),
        ("train.steps=[1", "train.steps=[1: no viable alternative at input '[1' (see https://hydra.cc/"),
    ],
)
def test_hydras_composition_errors_end_in_one_line_with_a_did_you_mean(tmp_path, monkeypatch, capsys, override, line):
    """Hydra reported these over several lines, with a ``+modle=small`` hint (which runs, ignoring it) and exit 1;
    now as every user error: ``error: ...``, one line, exit 2, nothing written."""
    from uavgnn.program import cli
    from uavgnn.runs import sweep_worker

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(sweep_worker.MAIN_PID_ENV, "")  # cli.main marks this process; restored after
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr(sys, "argv", ["run.py", override, "hardware.threads=1"])
    before = sorted(tmp_path.iterdir())
    with pytest.raises(SystemExit) as caught:
        cli.main()
    err = capsys.readouterr().err
    assert caught.value.code == 2 and err.count("\n") == 1 and err.startswith(f"error: {line}"), err
    assert sorted(tmp_path.iterdir()) == before


@pytest.mark.slow
def test_a_sweep_whose_job_does_not_compose_exits_2_in_one_line_and_leaves_no_sweep_directory(tmp_path) -> None:
    """Hydra made the sweep's directory and its multirun.yaml before composing the jobs; refused, it goes again."""
    proc = run_cli("-m", "model=small,smal", "hardware.threads=1", cwd=tmp_path, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == "error: model=smal: no option 'smal' in model; did you mean model=small?\n", proc.stderr
    assert not (tmp_path / "multirun").exists()


def test_refused_eval_and_solve_runs_leave_nothing_behind(tmp_path, monkeypatch) -> None:
    """A bad checkpoint or scene file is refused in one line, run in-process as the command line runs them
    (``uavgnn.program.from_python.run``), and leaves no directory behind (no ``.hydra/``, lock or ``run.log``)."""
    from uavgnn.infrastructure.errors import CheckpointError, SceneFileError
    from uavgnn.program.from_python import run

    work = tmp_path / "work"
    work.mkdir()
    (work / "bad.json").write_text('{"uav_range": [1.0]}')
    (work / "bad.pt").write_text("not a checkpoint")
    monkeypatch.chdir(work)
    cases = [
        (["mode=eval", "ckpt=missing.pt"], CheckpointError, "no such file"),
        (["mode=eval", "ckpt=bad.pt"], CheckpointError, "not a checkpoint"),
        (["mode=solve", "solver=model", "ckpt=bad.pt", "solve.n_uav=6"], CheckpointError, "not a checkpoint"),
        (["mode=solve", "task=file", "task.file=bad.json"], SceneFileError, "missing field"),
        (["mode=solve", "task=file", "task.file=missing.json"], SceneFileError, "no such scene file"),
        (["mode=eval", "ckpt=missing.pt", "hydra.run.dir=mine/eval"], CheckpointError, "no such file"),
    ]
    for overrides, error, text in cases:
        with pytest.raises(error, match=text):
            run([*overrides, "logger=none", "hardware.threads=1"])
        assert sorted(p.name for p in work.iterdir()) == ["bad.json", "bad.pt"], overrides
    with pytest.raises(ConfigError, match="did you mean model=small"):
        run(["mode=eval", "model=smal"])
