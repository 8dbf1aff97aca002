"""Every file a run directory (and a sweep directory) may hold, named once: the program and the reports read these
names, never string literals of their own.

A run directory::

    .hydra/config.yaml, hydra.yaml, overrides.yaml   Hydra's record, written once the run is accepted
    run.log                                           what the run printed (Hydra's job log: hydra.job.name = run)
    .uavgnn.lock                                      held by the live process
    metrics.jsonl                                     the metric history, one JSON object a line
    last.pt, best.pt (+ last.rank<r>.data.pt)         checkpoints (rank r's workload state beside last.pt)
    summary.json                                      the test phase's results
    failed.json, requeued.json                        a sweep job's failure; a requeue under a scheduler
    .wandb_run_id, wandb/, tensorboard/               the dashboards
    eval.json, transfer.json, ... *.png, *.gif        a mode's results and pictures
    partial/                                          an unfinished evaluation's finished sets (``runs.partial``)

A sweep directory holds Hydra's ``multirun.yaml``, one folder per job, and ``failed-<job>.json`` for a job that
refused its folder.
"""

from __future__ import annotations

# Hydra's record of a run (uavgnn writes it on acceptance: ``hydra.output_subdir`` is null)
HYDRA_RECORD = ".hydra"
HYDRA_CONFIG = "config.yaml"  # the run's composed config
HYDRA_SETTINGS = "hydra.yaml"  # Hydra's own config of the run
HYDRA_OVERRIDES = "overrides.yaml"  # the command line's overrides
RUN_LOG = "run.log"  # conf/hydra/job_logging/uavgnn.yaml: <hydra.job.name>.log, the job named "run" (conf/config.yaml)
LOCK = ".uavgnn.lock"

# what a run computes
HISTORY = "metrics.jsonl"
LAST = "last.pt"
BEST = "best.pt"
SUMMARY = "summary.json"

# how a run ended or goes on
FAILED = "failed.json"  # <job dir>/failed.json: a sweep's job that failed
REFUSED_PREFIX = "failed-"  # <sweep dir>/failed-<job>.json: a job that refused its directory
REQUEUED = "requeued.json"  # a job its scheduler stopped, requeued to resume
SWEEP_RECORD = "multirun.yaml"  # <sweep dir>/multirun.yaml: Hydra's record of a sweep

# the dashboards
WANDB_RUN_ID = ".wandb_run_id"  # a resumed run continues the same wandb run
WANDB_DIR = "wandb"
TENSORBOARD_DIR = "tensorboard"

# the modes' results
EVAL = "eval.json"  # mode=eval: every row
TRANSFER = "transfer.json"  # mode=eval of an assignment policy: the scales, shifts and the verdict
SOLVED_SCENE, ASSIGNMENT, SOLVE_METRICS = "scene.json", "assignment.json", "metrics.json"  # mode=solve
PROFILE = "profile.json"
PARTIAL = "partial"  # an unfinished mode=eval's finished test sets: the same command continues from them
BENCHMARK = "benchmark.json"
INFO = "info.json"
COMPARISON = "comparison"  # mode=compare: comparison.md, .csv, .tex, .png, .html
COMPARISON_TENSORBOARD = "comparison_tensorboard"  # mode=compare: the runs as one TensorBoard log directory
MARL_EVAL = "marl_eval.json"  # mode=compare over environment policies: the aggregate over tasks

# pictures
TEST_SCENE = "test_scene.png"
TRAJECTORIES = "trajectories.png"
EPISODE = "episode.gif"
LEARNING_CURVE = "learning_curve.png"
TEST_SETS = "test_sets.png"
TRANSFER_PICTURE = "transfer.png"
SHIFTS_PICTURE = "shifts.png"
FRONTIER_PICTURE = "frontier.png"
PROFILE_PICTURE = "profile.png"
BENCHMARK_PICTURE = "graph_benchmark.png"
PREDICTIONS_PICTURE = "predictions.png"
STEPS_AHEAD_PICTURE = "steps_ahead.png"

# what makes a directory hold a run, and what every accepted run directory holds
RUN_FILES = (HISTORY, LAST, BEST, SUMMARY)
BOOKKEEPING = frozenset({HYDRA_RECORD, RUN_LOG, LOCK})
# what an attempt of a run leaves before its first checkpoint (besides BOOKKEEPING): resume=auto starts it again
ATTEMPT_FILES = frozenset({HISTORY, FAILED, REQUEUED, WANDB_RUN_ID, WANDB_DIR, TENSORBOARD_DIR})


def comparison_file(suffix: str) -> str:
    """``comparison.<suffix>``: the comparison report in one of its forms (md, csv, tex, png, html)."""
    return f"{COMPARISON}.{suffix}"
