"""``mode=eval ckpt=PATH``: a checkpoint on fixed test sets, beside the controls, zero-shot at every scale.

An assignment policy: for each test distribution (``eval.positions``) and scale (``eval.scales``), a fixed-seed
cached test split (``min(data.test_scenes, eval.max_total_uavs // scale)`` scenes, labelled by the MILP with
``eval.milp_time_limit`` per scene) solved by the model and every control (``uavgnn.evaluation.methods``). A gap is
measured against the MILP's objective only where the MILP proved it optimal (``reference_optimal`` says on how
many scenes); the model's time is split into graph build, forward and decode. Then the distribution shifts at the
training size (``eval.shift_sets``; ``uavgnn.evaluation.transfer``). Writes ``transfer.json``, ``eval.json`` (the
rows), ``transfer.png``, ``shifts.png`` and ``frontier.png`` (gap against time per scene, every method, one panel
per scale).

An environment policy: ``eval.episodes`` test episodes at the size it trained for and - a graph actor, one set of
weights for any number of UAVs - zero-shot at every ``eval.scales`` size (episodes per size:
``eval.max_total_uavs // n_uav`` at most), on the nominal test set and each ``eval.disruption_sets`` one
(``uavgnn.evaluation.environment``). Writes ``eval.json``, ``test_sets.png``, ``trajectories.png`` and
``episode.gif``.

A dynamics model (``algorithm=dynamics``): its test phase again - the model beside the filters, with their
settings estimated and tuned (the tuned ones from the cache where its run left them), on its test splits - with
the same table and pictures; writes ``eval.json``, ``steps_ahead.png`` and ``predictions.png``.

The policies' evaluations say how long they will take before any work (from a probe of each set), log their
tables and pictures to the configured dashboard, and keep each finished test set in the run directory as they go
(``uavgnn.runs.partial``): stopped, the same command re-issued in the same directory (the stop prints it)
continues where it stopped, to the same tables and pictures.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from uavgnn.algorithms.dynamics import PRODUCT as DYNAMICS_MODEL
from uavgnn.algorithms.dynamics import load_dynamics_model
from uavgnn.algorithms.env_policy import PRODUCT as ENV_POLICY
from uavgnn.algorithms.env_policy import EnvPolicy, load_env_policy
from uavgnn.algorithms.registry import describe, making, produces
from uavgnn.algorithms.scene_policy import PRODUCT as ASSIGNMENT_POLICY
from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.config.schemas import Config
from uavgnn.config.settings import env_settings, scene_distribution, test_set_settings
from uavgnn.dynamics.tuning import TuningSettings
from uavgnn.evaluation import environment, transfer
from uavgnn.evaluation.dynamics import model_name, test_report
from uavgnn.evaluation.episodes import TEST_SEED
from uavgnn.evaluation.methods import INTERVAL_NOTE
from uavgnn.evaluation.test_sets import SetScorer
from uavgnn.infrastructure.console import Countdown, count, echo
from uavgnn.infrastructure.device import amp_dtype, prepare_device
from uavgnn.infrastructure.errors import CheckpointError, ConfigError, Interrupted, RunDirectoryError
from uavgnn.infrastructure.nested import flatten
from uavgnn.infrastructure.signals import EXIT_CODES
from uavgnn.infrastructure.storage import file_sha256, write_json
from uavgnn.loggers import publish
from uavgnn.reporting.episodes import episode_gif, plot_episodes
from uavgnn.reporting.evaluation_pictures import plot_frontier, plot_shifts, plot_test_sets, plot_transfer
from uavgnn.reporting.tables import format_table
from uavgnn.runs.checkpoints import checkpoint_path, load_checkpoint
from uavgnn.runs.directory import accept, continue_command, leftovers, refuse_leftovers
from uavgnn.runs.identity import is_incidental
from uavgnn.runs.layout import (
    EPISODE,
    EVAL,
    FRONTIER_PICTURE,
    SHIFTS_PICTURE,
    TEST_SETS,
    TRAJECTORIES,
    TRANSFER,
    TRANSFER_PICTURE,
)
from uavgnn.runs.partial import PartialResults


def run_eval(cfg: Config, out_dir: Path) -> dict:
    if not cfg.ckpt:
        raise ConfigError("mode=eval needs ckpt=PATH (a best.pt or last.pt from a training run)")
    stored = load_checkpoint(cfg.ckpt)["config"]
    evaluators = {
        ASSIGNMENT_POLICY: evaluate_assignment_policy,
        ENV_POLICY: evaluate_environment_policy,
        DYNAMICS_MODEL: evaluate_dynamics_model,
    }
    if produces(stored) not in evaluators:
        raise CheckpointError(
            f"checkpoint {cfg.ckpt} ({describe(stored)}): mode=eval takes an assignment policy "
            f"({making(ASSIGNMENT_POLICY)}), an environment policy ({making(ENV_POLICY)}) or a dynamics model "
            f"({making(DYNAMICS_MODEL)})"
        )
    partial = accept_or_continue(cfg, out_dir)
    evaluate = evaluators[produces(stored)]
    try:
        report = evaluate(cfg, out_dir, partial)
    except (Interrupted, KeyboardInterrupt) as err:
        stop = err if isinstance(err, Interrupted) else Interrupted("interrupted (Ctrl-C)", EXIT_CODES[signal.SIGINT])
        kept = f"{count(partial.finished(), 'finished test set')} kept in {partial.folder}"
        raise Interrupted(f"{stop}; {kept}; continue with: {continue_command(out_dir)}", stop.exit_code) from None
    except Exception:
        if not partial.finished():  # refused or failed before any set finished: nothing to keep, nothing left
            partial.clear()
        raise
    partial.clear()
    return report


def accept_or_continue(cfg: Config, out_dir: Path) -> PartialResults:
    """Accept ``out_dir`` for this evaluation: an empty directory, or one holding the finished sets of this same
    evaluation (the same config, the same checkpoint's bytes) stopped before it ended: it continues from them.
    Anything else is refused in one line, the directory left as it was."""
    config = flatten(OmegaConf.to_container(cfg, resolve=True))
    defining = {key: value for key, value in config.items() if key == "ckpt" or not is_incidental(key)}
    partial = PartialResults(out_dir, {"config": defining, "checkpoint_sha256": file_sha256(checkpoint_path(cfg.ckpt))})
    left = leftovers(out_dir)
    if left and not partial.exists():
        raise refuse_leftovers(out_dir, "eval", left)
    if partial.exists():
        changes = partial.changes()
        if changes:
            shown = ", ".join(f"{key}: {old} -> {new}" for key, (old, new) in list(changes.items())[:4])
            raise RunDirectoryError(
                f"{out_dir} holds an unfinished evaluation of another command ({shown}"
                f"{', ...' if len(changes) > 4 else ''}): continue it with its own command, or evaluate in "
                "another directory (hydra.run.dir=...)"
            )
        echo(f"continuing the evaluation in {out_dir}: {count(partial.finished(), 'finished test set')} kept")
    accept(out_dir, cfg)
    partial.start()
    return partial


def evaluate_assignment_policy(cfg: Config, out_dir: Path, partial: PartialResults) -> dict[str, Any]:
    device = prepare_device(cfg)
    model, graph, trained_cfg = load_policy(cfg.ckpt, device, "mode=eval ckpt")
    deciding = (("capacity_iters", "iters"), ("capacity_fill", "fill"), ("commit_stages", "stages"))
    for key, field in deciding:  # e.g. a checkpoint saved before a setting existed
        if cfg.eval[key] is not None:
            model.balancing = replace(model.balancing, **{field: cfg.eval[key]})
    if cfg.eval.k_max is not None:  # e.g. more candidates in large scenes than a checkpoint was trained with
        graph = replace(graph, k_max=cfg.eval.k_max)
    train_size = int(trained_cfg["data"]["n_uav"])
    own = OmegaConf.to_container(cfg.task)
    if cfg.task.get("folder"):  # your own test scenes, as they are: no scales, no positions
        labels, tests = [], [("folder", own, train_size)]
    else:
        labels, scales = list(cfg.eval.positions), sorted({train_size, *cfg.eval.scales})
        tests = [(where, {**own, "positions": where, "name": where}, n_uav) for where in labels for n_uav in scales]
    shifts = {name: OmegaConf.to_container(cfg.eval.shifts[name]) for name in cfg.eval.shift_sets}
    shift_sets = [(name, task, train_size) for name, task in transfer.shift_tasks(trained_cfg["task"], shifts).items()]
    scorer = SetScorer(test_set_settings(cfg, amp_dtype(cfg, device)), model, graph, device)
    scored = scorer.run(tests + shift_sets, partial)
    rows = [{"positions": label, **row} for (label, _, _), set_rows in zip(tests, scored) for row in set_rows]
    shift_rows = [
        {"test_set": label, **row}
        for (label, _, _), set_rows in zip(shift_sets, scored[len(tests) :])
        for row in set_rows
    ]
    ratios = transfer.transfer_ratios(rows, labels, train_size)  # none in a folder: no scales
    shown = [column for column in transfer.COLUMNS if any(column in row for row in rows)]  # bound_gap: if any
    echo(format_table(rows, shown) + "\n" + INTERVAL_NOTE)
    summary = transfer.shift_summary(shift_rows)
    if summary:
        columns = ["test_set", "scenes", *(f"{name}_gap" for name in transfer.SHIFT_COLUMNS), "beats_greedy"]
        echo(format_table(summary, [*columns, "shift_cost"]))
    report = {
        "checkpoint": str(cfg.ckpt),
        "train_n_uav": train_size,
        "decoder": cfg.eval.decoder,
        "milp_time_limit": cfg.eval.milp_time_limit,
        "gap_reference": "proven-optimal MILP objective (NaN where the MILP hit its time limit)",
        "score": "1 - optimality_gap",
        "estimated_s": scorer.estimated_s,
        "took_s": scorer.took_s,
        "rows": rows,
        "transfer": ratios,
        "trained_task": trained_cfg["task"],
        "shift_sets": {transfer.IN_DISTRIBUTION: "the trained task", **shifts},
        "shifts": summary,
        "shift_rows": shift_rows,
    }
    write_json(out_dir / TRANSFER, report)
    write_json(out_dir / EVAL, rows + shift_rows)
    plot_transfer(rows, train_size, out_dir / TRANSFER_PICTURE)
    plot_frontier(rows, out_dir / FRONTIER_PICTURE)
    pictures = {"eval/transfer_plot": out_dir / TRANSFER_PICTURE, "eval/frontier_plot": out_dir / FRONTIER_PICTURE}
    if summary:
        plot_shifts(summary, train_size, out_dir / SHIFTS_PICTURE)
        pictures["eval/shifts_plot"] = out_dir / SHIFTS_PICTURE
    headline = {f"transfer_ratio/{t['positions']}/{t['n_uav']}": t["transfer_ratio"] for t in ratios}
    headline.update({f"shift_gap/{t['test_set']}": t["model_gap"] for t in summary})
    publish(cfg, out_dir, {"eval/methods": rows, "eval/transfer": ratios, "eval/shifts": summary}, pictures, headline)
    written = [TRANSFER, TRANSFER_PICTURE, FRONTIER_PICTURE, *([SHIFTS_PICTURE] if summary else [])]
    echo(f"results in {out_dir} ({', '.join(written)})")
    return report


def evaluate_environment_policy(cfg: Config, out_dir: Path, partial: PartialResults) -> dict[str, Any]:
    device = prepare_device(cfg)
    policy, config = load_env_policy(cfg.ckpt, "mode=eval ckpt", device)
    trained, dist = env_settings(config), scene_distribution(config)
    name, rows = config.algorithm.name, []
    sets = {"nominal": {}, **{key: dict(cfg.eval.disruptions[key]) for key in cfg.eval.disruption_sets}}
    flown = {trained.n_uav, *config.env.get("train_sizes", [])}  # the sizes it trained at: not zero-shot there
    sizes = {n: max(1, min(cfg.eval.episodes, cfg.eval.max_total_uavs // n)) for n in swarm_sizes(cfg, config)}
    pieces = [(n_uav, test_set) for n_uav in sizes for test_set in sets]  # each size's nominal set first
    done = {piece: partial.get(_piece_key(piece)) for piece in pieces}
    start = time.perf_counter()
    expected = {}
    for n_uav, test_set in (piece for piece in pieces if done[piece] is None):
        settings = environment.test_set_settings(trained, n_uav, sets[test_set])
        warm_up = not any(n == n_uav for n, _ in expected)
        expected[n_uav, test_set] = environment.probe_seconds(
            policy, name, settings, dist, sizes[n_uav], device, warm_up
        )
    countdown = Countdown(expected)
    kept = sum(value is not None for value in done.values())
    echo(
        f"mode=eval: {count(len(pieces), 'test set')} ({len(sets)} at each of {count(len(sizes), 'size')}"
        f"{f'; {kept} finished before, kept' if kept else ''}): about {countdown.total_s:.0f} s (measured on "
        f"{environment.PROBE_STEPS}-step probes of each in {time.perf_counter() - start:.0f} s)"
    )
    countdown.start = time.perf_counter()
    for number, (n_uav, test_set) in enumerate(pieces, 1):
        if done[n_uav, test_set] is None:
            echo(
                f"  set {number}/{len(pieces)}: {test_set}, {count(n_uav, 'UAV')}, {count(sizes[n_uav], 'episode')}, "
                f"about {expected[n_uav, test_set]:.0f} s"
            )
            nominal = None if test_set == "nominal" else environment.planner_return(done[n_uav, "nominal"])
            settings = environment.test_set_settings(trained, n_uav, sets[test_set])
            set_rows, scores = environment.score_set(
                policy, name, settings, dist, test_set, sizes[n_uav], device, nominal
            )
            if (n_uav, test_set) == (trained.n_uav, "nominal"):  # the pictures: drawn before the set is kept
                plot_episodes(scores, trained.service_radius, out_dir / TRAJECTORIES)
                episode_gif(scores[name], trained.service_radius, out_dir / EPISODE)
            done[n_uav, test_set] = partial.put(_piece_key((n_uav, test_set)), set_rows)
            echo(countdown.finish((n_uav, test_set)))
        if test_set == list(sets)[-1]:
            size_rows = [row for t in sets for row in done[n_uav, t]]
            rows += size_rows
            zero_shot = "" if n_uav in flown else f" (zero-shot: trained at {', '.join(map(str, sorted(flown)))})"
            echo(
                f"Test episodes: {count(sizes[n_uav], 'episode')} of {count(n_uav, 'UAV')}, {trained.horizon} steps "
                f"({trained.name} environment, {dist.positions} scenes), {name} from {cfg.ckpt}{zero_shot}\n"
                + format_table(size_rows, environment.COLUMNS)
            )
    echo(f"mode=eval: scored in {countdown.elapsed_s:.0f} s (estimated {countdown.total_s:.0f} s)")
    echo(
        "of_planner: the share of the central scripted planner's return on the same test set; of_nominal_planner: "
        "of its return on the nominal set; rounds, messages_per_uav: the rounds of messages and the messages each UAV "
        "receives per decision, where a method acts on what its UAVs hear (the policy and the decentralised planner "
        "one round over the observation's links, CBBA its auction's)"
    )
    pictures = {"eval/trajectories": out_dir / TRAJECTORIES}
    if len(sets) > 1:
        methods = environment.compared_methods(rows, name)
        pictures["eval/test_sets"] = plot_test_sets(rows, methods, out_dir / TEST_SETS)
    report = {
        "checkpoint": str(cfg.ckpt),
        "algorithm": name,
        "n_uav": trained.n_uav,
        "horizon": trained.horizon,
        "episodes": cfg.eval.episodes,
        "seed": TEST_SEED,
        "test_sets": sets,
        "estimated_s": countdown.total_s,
        "took_s": countdown.elapsed_s,
        "rows": rows,
    }
    write_json(out_dir / EVAL, report)
    summary = {
        f"eval/{'' if row['n_uav'] == trained.n_uav else 'n' + str(row['n_uav']) + '/'}"
        f"{'' if row['test_set'] == 'nominal' else row['test_set'] + '/'}{key}": row[key]
        for row in rows
        if row["method"] == name
        for key in ("return", "of_planner", "completion_rate")
    }
    publish(cfg, out_dir, {"eval/episodes": rows}, pictures, summary)
    written = [EVAL, TRAJECTORIES, EPISODE, *([TEST_SETS] if len(sets) > 1 else [])]
    echo(f"results in {out_dir} ({', '.join(written)})")
    return report


def evaluate_dynamics_model(cfg: Config, out_dir: Path, partial: PartialResults) -> dict[str, Any]:
    """The dynamics model against the filters (estimated and tuned, as its test phase tuned them: from the cache
    when that run's is here) and constant velocity on its test splits: the test phase's table and pictures."""
    model, work, config = load_dynamics_model(cfg.ckpt, "mode=eval ckpt", prepare_device(cfg), cfg.data.cache_dir)
    alg = config.algorithm
    start = time.perf_counter()
    report = test_report(model, work, TuningSettings(alg.filter_tuning_steps), out_dir)
    echo(
        f"Test rollouts of {cfg.ckpt} ({alg.rollout_policy} policy; test_ood: wind and drag x{alg.ood_scale})\n"
        + report.text
    )
    name = model_name(model)
    result = {
        "checkpoint": str(cfg.ckpt),
        "model": name,
        "took_s": time.perf_counter() - start,
        "rows": report.rows,
        "filters_val_data_loss": report.tuning,
    }
    write_json(out_dir / EVAL, result)
    figures = report.figures(name)
    publish(cfg, out_dir, {"eval/dynamics": report.rows}, report.pictures, {f"eval/{k}": v for k, v in figures.items()})
    echo(f"results in {out_dir} ({', '.join([EVAL, *(path.name for path in report.pictures.values())])})")
    return result


def _piece_key(piece: tuple[int, str]) -> str:
    """How a (size, test set) of an environment policy's evaluation is kept (``PartialResults``)."""
    return json.dumps(list(piece))


def swarm_sizes(cfg: Config, config: Any) -> list[int]:
    """The sizes to score an environment policy at: the training size, and ``eval.scales`` where one set of
    weights serves every UAV (a graph actor: ``model`` a TransformerGNN size); per-agent networks fit their
    training size only."""
    trained = config.env.n_uav
    if EnvPolicy.is_mlp(config):
        if set(cfg.eval.scales) - {trained}:
            echo(
                f"model=mlp: the policy's networks are per agent (or take one-hot agent ids): scored at its "
                f"{count(trained, 'UAV')} only (eval.scales={list(cfg.eval.scales)} takes a graph actor)"
            )
        return [trained]
    return sorted({trained, *cfg.eval.scales})
