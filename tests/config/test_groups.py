"""Every option of every config group composes, and runs for a few steps on tiny scenes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from conftest import ROOT, compose, run_cli, shrink
from omegaconf import open_dict
from torch import nn

from uavgnn.algorithms.base import DatasetWorkload, EnvAgents, Trained, Workload
from uavgnn.algorithms.env_policy import PRODUCT as ENV_POLICY
from uavgnn.algorithms.registry import algorithms, check_config, make_algorithm
from uavgnn.config.settings import env_settings, scene_distribution
from uavgnn.envs.uav_env import make_env
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.modes.benchmark import run_benchmark
from uavgnn.modes.solve import run_solve
from uavgnn.modes.train import run_train
from uavgnn.problem.generator import generate_scenes
from uavgnn.problem.scene_io import save_scene
from uavgnn.problem.scenes import SceneDistribution

CONF = ROOT / "conf"
GROUPS = ("task", "model", "hardware", "optim", "curriculum", "algorithm", "logger", "experiment")
OPTIONS = [(g, p.stem) for g in GROUPS for p in sorted((CONF / g).glob("*.yaml"))]


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("graph-cache")


def test_groups_have_the_documented_options() -> None:
    found = {g: {o for gg, o in OPTIONS if gg == g} for g in GROUPS}
    assert {"tiny", "small", "medium", "large"} <= found["model"]
    assert {"cpu", "low_mem", "mid_mem", "high_mem", "multi_gpu"} <= found["hardware"]
    assert {"uniform", "clustered", "file"} <= found["task"]
    assert {"wandb", "tensorboard", "jsonl", "none"} <= found["logger"]
    assert {"dev", "prod", "debug"} <= found["experiment"]
    assert "none" in found["curriculum"]
    assert {
        name
        for name, algorithm in algorithms().items()  # each of the package's: a plug-in's needs no YAML
        if algorithm.__module__.startswith("uavgnn.")
    } <= found["algorithm"]


def test_model_sizes() -> None:
    sizes = {name: compose(f"model={name}").model for name in ("tiny", "small", "medium", "large")}
    assert [(m.hidden, m.heads, m.layers) for m in sizes.values()] == [(32, 1, 1), (64, 2, 2), (128, 4, 3), (256, 8, 4)]


@pytest.mark.slow  # trains a few steps per option
@pytest.mark.parametrize("group, option", OPTIONS)
def test_every_option_composes_and_runs(group, option, tmp_path, shared_cache) -> None:
    overrides = [f"{group}={option}"]
    if (group, option) == ("model", "mlp"):  # the environment policies' actors: each of them runs them
        for name in (n for n, algorithm in algorithms().items() if algorithm.produces == ENV_POLICY):
            check_config(compose("model=mlp", f"algorithm={name}"))
        with pytest.raises(
            ConfigError, match="model=mlp with algorithm=imitation: its networks are a TransformerGNN size"
        ):
            check_config(compose("model=mlp"))
        return
    if (group, option) in (("model", "tcn"), ("model", "learned_filter")):  # the dynamics models: run there
        for name in (n for n, algorithm in algorithms().items() if algorithm.produces.name == "dynamics model"):
            check_config(compose(f"model={option}", f"algorithm={name}"))
        with pytest.raises(ConfigError, match=f"model={option} with algorithm=imitation"):
            check_config(compose(f"model={option}"))
        return
    if group != "logger":
        overrides.append("logger=jsonl")
    if (group, option) == ("task", "file"):
        scene = generate_scenes(SceneDistribution(), 6, 1, 0)[0]
        save_scene(tmp_path / "scene.json", scene)
        overrides += ["mode=solve", "solver=greedy", f"task.file={tmp_path / 'scene.json'}"]
    if (group, option) == ("task", "folder"):  # a flat folder of 10 scene files: 8 to train, 1 each to val, test
        (tmp_path / "scenes").mkdir()
        for i, scene in enumerate(generate_scenes(SceneDistribution(), 6, 10, 0)):
            save_scene(tmp_path / "scenes" / f"scene{i}.json", scene)
        overrides += [f"task.folder={tmp_path / 'scenes'}", "data.source=cache"]  # the main job's REINFORCE: yours
    cfg = shrink(compose(*overrides), shared_cache)
    check_config(cfg)
    if (group, option) == ("optim", "gpu"):
        assert cfg.optim.compile and cfg.optim.amp
        with open_dict(cfg):  # torch.compile on a CPU costs a minute; the benchmark and info tests compile already
            cfg.optim.compile = False
    out = tmp_path / "run"
    out.mkdir()
    if cfg.mode == "solve":
        metrics = run_solve(cfg, out)
        assert metrics["infeasible"] == 0 and (out / "assignment.json").exists()
        return
    gap = run_train(cfg, out)
    summary = json.loads((out / "summary.json").read_text())
    if algorithms()[cfg.algorithm.name].produces.name == "dynamics model":
        assert summary["steps"] == 4 and summary["best_val_k_step_rmse"] == pytest.approx(gap)
        model = "learned_filter" if cfg.model.name == "learned_filter" else "tcn"
        methods = {model, "ekf_tuned", "ekf_estimated", "kf_tuned", "kf_estimated", "constant_velocity"}
        assert {r["method"] for r in summary["test"]} == methods
        return
    if algorithms()[cfg.algorithm.name].produces == ENV_POLICY:  # what the plug-in declares, not its name
        assert summary["steps"] == 4 and summary["best_val_planner_gap"] == pytest.approx(gap)
        idle_home = ["planner, idle home"] if cfg.env.goto_home else []  # the rule's row beside a home action
        told = ["planner, told motion", "decentralised, told motion"] if cfg.env.target_speed > 0 else []
        assert [r["method"] for r in summary["test"]] == [
            cfg.algorithm.name,
            "scripted planner",
            "decentralised planner",
            "CBBA",
            *idle_home,
            *told,  # the planners told the targets' motion, where targets move
            "nearest target",
            "random",
        ]
        for picture in ("trajectories.png", "learning_curve.png", "episode.gif", "last.pt", "best.pt"):
            assert (out / picture).stat().st_size > 0, picture
        return
    assert summary["steps"] == 4 and summary["best_val_optimality_gap"] == pytest.approx(gap)
    assert {r["method"] for r in summary["test"]} >= {"greedy", "lap", "milp"}
    assert (out / "last.pt").exists() and (out / "best.pt").exists() and (out / "test_scene.png").exists()
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("val/optimality_gap" in row for row in history)
    if (group, option) == ("logger", "tensorboard"):
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(out / "tensorboard"))
        events.Reload()
        assert "val/optimality_gap" in events.Tags()["scalars"]


@pytest.mark.slow  # one case per kind runs by default (type, unknown key, value, cross-key); all with -m heavy
@pytest.mark.parametrize(
    "override, message",
    [
        # wrong types and unknown keys: Hydra, at composition, said in our one line
        ("model.hidden=abc", "error: model.hidden=abc: Value 'abc' of type 'str' could not be converted to Integer"),
        pytest.param("optim.amp=maybe", "optim.amp=maybe: Value 'maybe' is not a valid bool", marks=pytest.mark.heavy),
        ("modle=small", "error: modle=small: no group or key 'modle'; did you mean model=small?"),
        pytest.param(
            "model.hiden=3",
            "model.hiden=3: no key 'model.hiden'; did you mean model.hidden=3?",
            marks=pytest.mark.heavy,
        ),
        pytest.param(
            "hardware.batch_size=1.5",
            "hardware.batch_size=1.5 must be a positive integer or 'auto'",
            marks=pytest.mark.heavy,
        ),
        ("model.hidden=-1", "model.hidden=-1 must be >= 1"),  # bad values: uavgnn.config.schemas.validate
        pytest.param(
            "train.schedule=linear", "train.schedule='linear' is not one of cosine, plateau", marks=pytest.mark.heavy
        ),
        ("model.hidden=31", "model.hidden=31 must be divisible by model.heads=2"),
        pytest.param("task.need_min=4", "task.need_min=4 exceeds task.need_max=3", marks=pytest.mark.heavy),
    ],
)
def test_bad_config_fails_before_any_work_naming_the_key(override, message, tmp_path) -> None:
    proc = run_cli(
        override, f"hydra.run.dir={tmp_path / 'run'}", f"data.cache_dir={tmp_path / 'cache'}", cwd=tmp_path, check=False
    )
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "cache").exists()  # failed before any work


def test_batch_size_and_checkpoint_layers_are_validated() -> None:
    check_config(compose("hardware.batch_size=auto"))
    with pytest.raises(ConfigError, match="hardware.batch_size='big' must be a positive integer or 'auto'"):
        check_config(compose("hardware.batch_size=big"))
    with pytest.raises(ConfigError, match=r"optim.checkpoint_layers=\[0, 5\] must index the model's 2 layers"):
        check_config(compose("optim.checkpoint_layers=[0,5]"))


def test_the_schema_defaults_are_the_composed_default_config() -> None:
    """One source of truth: the schemas' defaults (``default_config``) equal what ``python run.py`` (the main job:
    imitation) composes, key by key, but for the main job's own budget, every algorithm's keys are its schema's, and
    every group has a YAML file (a comment per key)."""
    from omegaconf import OmegaConf

    from uavgnn.algorithms.checkpoint_config import default_config
    from uavgnn.algorithms.registry import algorithms
    from uavgnn.infrastructure.nested import flatten

    composed = flatten(OmegaConf.to_container(compose("algorithm=imitation"), resolve=True))
    schema = flatten(OmegaConf.to_container(default_config()))
    assert composed == {**schema, "train.steps": 600}  # the main job's budget (algorithm/imitation.yaml)
    assert compose() == compose("algorithm=imitation")  # the main job
    # algorithm=imitation_reinforce: REINFORCE's schema with an imitation phase
    assert compose("algorithm=imitation_reinforce").algorithm == {
        **default_config("reinforce").algorithm,
        "imitation_steps": 1500,
    }
    for name in algorithms():
        assert compose(f"algorithm={name}").algorithm == default_config(name).algorithm, name
    for group in (
        "task",
        "model",
        "hardware",
        "optim",
        "curriculum",
        "algorithm",
        "logger",
        "data",
        "train",
        "eval",
        "solve",
        "profile",
        "benchmark",
    ):
        assert list((CONF / group).glob("*.yaml")), group
    for path in CONF.glob("*/default.yaml"):
        lines = [line for line in path.read_text().splitlines() if line and not line.startswith(("#", " "))]
        assert all("#" in line for line in lines), path


def test_the_disrupted_swarm_preset_is_the_recipe_benchmarks_measured() -> None:
    """experiment=swarm_disrupted quotes BENCHMARKS.md's figures of the told-motion recipe (mobsLh): it must stay
    that run's command, as BENCHMARKS.md gives it (seed 0's line, its output folder aside)."""
    line = next(x for x in (ROOT / "BENCHMARKS.md").read_text().splitlines() if "outputs/s64/mobsLh_s0 " in x)
    measured = [word for word in line.split("#")[0].split()[2:] if not word.startswith("hydra.run.dir=")]
    assert measured[0] == "experiment=swarm" and "algorithm.target_scores=true" in measured
    preset = compose("experiment=swarm_disrupted", "seed=0", "logger=jsonl", "hardware.threads=1")
    assert preset == compose(*measured)
    assert compose("experiment=swarm_disrupted") != compose("experiment=swarm")


@pytest.mark.parametrize("preset", sorted(p.stem for p in (CONF / "env").glob("*.yaml")))
def test_every_env_preset_composes_and_steps(preset) -> None:
    from uavgnn.envs.policies import random_policy
    from uavgnn.envs.uav_env import UAVEnv

    cfg = compose(f"env={preset}")
    check_config(cfg)
    settings = env_settings(cfg)
    env = UAVEnv(settings, scene_distribution(cfg), 4, torch.device("cpu"), seed=0)
    obs, state = env.reset()
    step = env.step(random_policy(env))
    assert step.obs.shape == obs.shape == (4, settings.n_uav, settings.obs_dim())
    assert step.reward.shape == (4, settings.n_uav) and torch.isfinite(step.reward).all()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["eval.shift_sets=[needs_5,nope]"], "eval.shift_sets: nope not defined in eval.shifts"),
        (["+eval.shifts.bad={need_max:0}", "eval.shift_sets=[bad]"], "eval.shifts.bad: task.need_max=0 must be >= 1"),
        (
            ["+eval.shifts.typo={nead_max:4}", "eval.shift_sets=[typo]"],
            "eval.shifts.typo: nead_max is not a task field",
        ),
        (
            ["+eval.shifts.odd={positions:ring}", "eval.shift_sets=[odd]"],
            "eval.shifts.odd: task.positions='ring' is not one of uniform, clustered, mixed",
        ),
        (["eval.disruption_sets=[failures,nope]"], "eval.disruption_sets: nope not defined in eval.disruptions"),
        (
            ["+eval.disruptions.nominal={failures:0.5}", "eval.disruption_sets=[nominal]"],
            "'nominal' is the undisrupted",
        ),
        (
            ["+eval.disruptions.typo={failure:0.5}", "eval.disruption_sets=[typo]"],
            "eval.disruptions.typo: failure is not a disruption",
        ),
        (
            ["+eval.disruptions.bad={comm_drop:1.0}", "eval.disruption_sets=[bad]"],
            r"eval.disruptions.bad.comm_drop=1.0 must be in \[0, 1\)",
        ),
        (
            ["+eval.disruptions.late={appear_steps:-1}", "eval.disruption_sets=[late]"],
            "eval.disruptions.late.appear_steps=-1 must be >= 0",
        ),
        (
            ["+eval.disruptions.late={appear_steps:40.5}", "eval.disruption_sets=[late]"],
            "eval.disruptions.late.appear_steps=40.5 must be a whole number",
        ),
        (["env.disrupted_share=0"], r"env.disrupted_share=0.0 must be in \(0, 1\]"),
        (["env.goto_home=true"], "env.goto_home=true: the home action is a goto action; env.action is continuous"),
        (["task=mixed", "algorithm=masac", "model=mlp"], "task=mixed with algorithm=masac"),
        (["eval.decoder=guided"], "the model-guided MILP is a row of its own in every test table"),
    ],
)
def test_shifted_test_sets_and_mixed_scenes_are_validated(overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        check_config(compose(*overrides))


def test_a_test_set_of_late_targets_is_valid() -> None:
    """When targets appear is a test set's field too (the nominal set keeps the trained one)."""
    check_config(compose("+eval.disruptions.late={appear_steps:40}", "eval.disruption_sets=[late,failures]"))


def test_default_shifted_test_sets_are_all_run_and_valid() -> None:
    cfg = compose("+eval.shifts.needs_4={need_max:4}", "eval.shift_sets=[needs_4]")
    check_config(cfg)
    assert set(cfg.eval.shifts) > {"needs_4", "clustered_2", "ranges_wide"} and cfg.eval.shift_sets == ["needs_4"]
    default = compose().eval
    assert list(default.shift_sets) == list(default.shifts)  # every defined set runs by default


def fields(algorithm: str) -> list[str]:
    """The keys of ``algorithm``'s schema."""
    return [f.name for f in dataclasses.fields(algorithms()[algorithm].config)]


@pytest.mark.parametrize("algorithm", sorted(algorithms()))
def test_an_algorithm_composes_its_own_keys_only(algorithm) -> None:
    """``algorithm=<name>`` takes its schema: another algorithm's key is an error naming the key and the schema."""
    from hydra.errors import ConfigCompositionException

    key = "algorithm." + next(k for other in algorithms() for k in fields(other) if k not in fields(algorithm))
    with pytest.raises(ConfigError) as err:
        compose(f"algorithm={algorithm}", f"{key}=1")
    assert str(err.value).startswith(f"{key}=1: no key '{key}'") and "\n" not in str(err.value)  # the user's line
    refused = err.value.__context__  # Hydra's own error, which the line says: the schema refused the key
    assert isinstance(refused, ConfigCompositionException) and f"Could not override '{key}'" in str(refused)
    assert f"not in '{type(algorithms()[algorithm].config()).__name__}'" in str(refused.__cause__)
    assert set(compose(f"algorithm={algorithm}").algorithm) == set(fields(algorithm))


@pytest.mark.parametrize("name", sorted(algorithms()))
def test_modes_ask_each_plug_in_what_measures_it(name, tmp_path) -> None:
    """The modes that time a step must not guess the algorithm: ``mode=benchmark`` assuming a TransformerGNN was a
    traceback for MAPPO and dynamics after its cache section ran, and ``mode=profile`` sent an algorithm to a
    ``benchmarks/bench_<name>.py`` built from its name. So each plug-in declares it: one the benchmark does not
    measure is refused in one line, before any work, naming those it measures (from the registry) and what times
    this one."""
    algorithm = algorithms()[name]
    cfg = compose(f"algorithm={name}", "mode=benchmark")
    if algorithm.benchmarked:
        assert algorithm.capabilities.scene_splits  # the benchmark's sections build scene splits and a TransformerGNN
        return
    with pytest.raises(ConfigError) as refused:
        run_benchmark(cfg, tmp_path / "out")
    benchmarked = [n for n, found in algorithms().items() if found.benchmarked]
    assert str(refused.value) == (
        f"mode=benchmark measures the scene-assignment pipeline of algorithm="
        f"{', '.join(benchmarked)}; algorithm={name}: time it with {algorithm.timed_by}"
    )
    assert not (tmp_path / "out").exists()
    timer = algorithm.timed_by.split()[0]
    assert not timer.startswith("benchmarks/") or (ROOT / timer).is_file()  # a script it names exists


@pytest.mark.parametrize("name", sorted(algorithms()))
def test_every_algorithm_says_what_the_comparison_and_the_help_show_of_it(name) -> None:
    """What a comparison and the help show of an algorithm comes from the algorithm, not from sniffing summary keys
    or a list kept by hand (which a new algorithm would be missing from). Each plug-in declares them: its
    comparison shows the figure that selected its ``best.pt`` (as ``write_results`` records it) in that figure's
    direction, its bars are figures it shows, and it says what it is in one line (``uavgnn --help``)."""
    algorithm = algorithms()[name]
    shown = {score.key: score.minimize for score in algorithm.compared.final}
    assert len(shown) == len(algorithm.compared.final) and set(algorithm.compared.bars) <= set(shown)
    assert shown[f"best_{algorithm.score.key.replace('/', '_')}"] == algorithm.score.minimize
    assert algorithm.summary() and "\n" not in algorithm.summary()


@pytest.mark.parametrize("name", sorted(algorithms()))
def test_every_algorithm_keeps_the_declared_contracts(name, tmp_path) -> None:
    """The loop, validation and the test phase call ``num_parameters``, ``play``, ``act`` and ``acting``, so each
    is a declared contract (``algorithms/base.py``), not a convention (one ``act`` signature, no ``getattr``
    probing, ``host_batches`` in a protocol), and every registered algorithm keeps them:
    its networks are ``Trained`` (an environment policy's are ``EnvAgents``, whose ``acting`` networks exist and
    whose ``act`` plays), and one that trains on a fixed dataset has a ``DatasetWorkload``."""
    cfg = shrink(compose(f"algorithm={name}"), tmp_path / "cache")
    algorithm = make_algorithm(cfg, torch.device("cpu"))
    model = algorithm.build_model(cfg)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)  # a target network's copy is not
    assert isinstance(model, Trained) and model.num_parameters() == trained
    if algorithm.produces == ENV_POLICY:
        assert isinstance(model, EnvAgents) and all(
            isinstance(getattr(model, n), nn.Module | nn.Parameter) for n in model.acting
        )
        env = make_env(env_settings(cfg), scene_distribution(cfg), 2, "cpu", seed=0)
        assert torch.equal(model.act(env.observe(), env.available_actions(), None), model.play(env))  # no sampling
    work = algorithm.workload(model)
    assert isinstance(work, Workload)
    if not algorithm.cadence().updates:
        assert isinstance(work, DatasetWorkload) and next(work.host_batches(0, 2)) is not None
