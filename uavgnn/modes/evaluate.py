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

Both log their tables and pictures to the configured dashboard.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from uavgnn.algorithms.env_policy import PRODUCT as ENV_POLICY
from uavgnn.algorithms.env_policy import EnvPolicy, load_env_policy
from uavgnn.algorithms.registry import describe, making, produces
from uavgnn.algorithms.scene_policy import PRODUCT as ASSIGNMENT_POLICY
from uavgnn.algorithms.scene_policy import load_policy
from uavgnn.config.schemas import Config
from uavgnn.config.settings import env_settings, scene_distribution, test_set_settings
from uavgnn.evaluation import environment, transfer
from uavgnn.evaluation.episodes import TEST_SEED
from uavgnn.evaluation.methods import INTERVAL_NOTE
from uavgnn.evaluation.test_sets import SetScorer
from uavgnn.infrastructure.console import count, echo
from uavgnn.infrastructure.device import amp_dtype, prepare_device
from uavgnn.infrastructure.errors import CheckpointError, ConfigError
from uavgnn.infrastructure.storage import write_json
from uavgnn.loggers import publish
from uavgnn.reporting.episodes import episode_gif, plot_episodes
from uavgnn.reporting.evaluation_pictures import plot_frontier, plot_shifts, plot_test_sets, plot_transfer
from uavgnn.reporting.tables import format_table
from uavgnn.runs.checkpoints import load_checkpoint
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


def run_eval(cfg: Config, out_dir: Path) -> dict:
    if not cfg.ckpt:
        raise ConfigError("mode=eval needs ckpt=PATH (a best.pt or last.pt from a training run)")
    stored = load_checkpoint(cfg.ckpt)["config"]
    if produces(stored) == ENV_POLICY:
        return evaluate_environment_policy(cfg, out_dir)
    if produces(stored) != ASSIGNMENT_POLICY:
        raise CheckpointError(
            f"checkpoint {cfg.ckpt} ({describe(stored)}): mode=eval takes an assignment policy "
            f"({making(ASSIGNMENT_POLICY)}) or an environment policy ({making(ENV_POLICY)})"
        )
    return evaluate_assignment_policy(cfg, out_dir)


def evaluate_assignment_policy(cfg: Config, out_dir: Path) -> dict[str, Any]:
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
    scored = scorer.run(tests + shift_sets)
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


def evaluate_environment_policy(cfg: Config, out_dir: Path) -> dict[str, Any]:
    device = prepare_device(cfg)
    policy, config = load_env_policy(cfg.ckpt, "mode=eval ckpt", device)
    trained, dist = env_settings(config), scene_distribution(config)
    name, rows, scores = config.algorithm.name, [], {}
    sets = {"nominal": {}, **{key: dict(cfg.eval.disruptions[key]) for key in cfg.eval.disruption_sets}}
    flown = {trained.n_uav, *config.env.get("train_sizes", [])}  # the sizes it trained at: not zero-shot there
    for n_uav in swarm_sizes(cfg, config):
        episodes = max(1, min(cfg.eval.episodes, cfg.eval.max_total_uavs // n_uav))
        size_rows, size_scores = environment.score_at_size(policy, name, trained, dist, n_uav, sets, episodes, device)
        if n_uav == trained.n_uav:
            scores = size_scores  # the pictures' episodes: at the size it trained for
        rows += size_rows
        zero_shot = "" if n_uav in flown else f" (zero-shot: trained at {', '.join(map(str, sorted(flown)))})"
        echo(
            f"Test episodes: {count(episodes, 'episode')} of {count(n_uav, 'UAV')}, {trained.horizon} steps "
            f"({trained.name} environment, {dist.positions} scenes), {name} from {cfg.ckpt}{zero_shot}\n"
            + format_table(size_rows, environment.COLUMNS)
        )
    echo(
        "of_planner: the share of the central scripted planner's return on the same test set; of_nominal_planner: "
        "of its return on the nominal set; rounds, messages_per_uav: the rounds of messages and the messages each UAV "
        "receives per decision, where a method acts on what its UAVs hear (the policy and the decentralised planner "
        "one round over the observation's links, CBBA its auction's)"
    )
    plot_episodes(scores, trained.service_radius, out_dir / TRAJECTORIES)
    episode_gif(scores[name], trained.service_radius, out_dir / EPISODE)
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
