"""The modes (``mode=...``), listed once: what runs each, its line in ``uavgnn --help``, the config group that
only it reads, whether its run directory is accepted before it starts and whether it returns the value a
sweeper minimises. Validation, the dispatch, ``--help`` and a training run's config all read this list."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mode:
    name: str
    runs: str  # "module:function" of uavgnn.modes, f(cfg, out_dir): imported on use, so a mode loads what it needs
    summary: str  # its line in uavgnn --help
    group: str | None = None  # the config group only this mode reads (left out of a training run's config)
    accepts_first: bool = True  # the run directory is accepted before it runs (else the mode decides, if at all)
    objective: bool = False  # returns the value a sweeper minimises (the best validation score)


MODES = {
    mode.name: mode
    for mode in (
        Mode(
            "train",
            "uavgnn.modes.train:run_train",
            "train, evaluate the best checkpoint on the test set against greedy/lap/MILP (default)",
            accepts_first=False,  # once every resume check has passed
            objective=True,
        ),
        Mode(
            "eval",
            "uavgnn.modes.evaluate:run_eval",
            "zero-shot transfer of ckpt=PATH to larger scenes (eval.scales=[16,64,256])",
            accepts_first=False,  # an unfinished evaluation of the same command there continues
        ),
        Mode(
            "solve",
            "uavgnn.modes.solve:run_solve",
            "solve one scene: solver=milp|greedy|lap|mcf|model|guided|pruned (task=file task.file=S.json)",
            group="solve",
        ),
        Mode(
            "cache",
            "uavgnn.modes.cache:run_cache",
            "list, verify or clear the graph caches: action=info|verify|clear [force=true]",
            accepts_first=False,  # it writes nothing into a run directory
        ),
        Mode(
            "compare",
            "uavgnn.modes.compare:run_compare",
            "comparison report of a sweep or of runs: path=multirun/<date>/<time> | path=[a,b]",
            group="compare",
            accepts_first=False,  # its own directory only when it writes the report there
        ),
        Mode(
            "info",
            "uavgnn.modes.info:run_info",
            "environment check: versions, devices, AMP/compile support, the preset to use",
        ),
        Mode(
            "profile",
            "uavgnn.modes.profile:run_profile",
            "time per training stage, throughput, memory, the bottleneck and what to change",
            group="profile",
        ),
        Mode(
            "benchmark",
            "uavgnn.modes.benchmark:run_benchmark",
            "what each optimisation buys here (benchmark=quick: under a minute on a laptop CPU)",
            group="benchmark",
        ),
        Mode(
            "rollouts", "uavgnn.modes.rollouts:run_rollouts", "simulate the trajectory datasets of the dynamics model"
        ),
    )
}


def listing() -> str:
    """The modes as ``uavgnn --help`` lists them, one line each."""
    width = max(map(len, MODES))
    return "\n".join(f"  {name:<{width}}  {mode.summary}" for name, mode in MODES.items())
