"""What ``mode=compare`` shows of its runs, asked of their algorithms: each run's algorithm found by the name in
its recorded config, the figures and curves those algorithms declare (``Algorithm.compared``; runs of several
algorithms: each one's, side by side) and which runs trained an environment policy (the MARL section)."""

from __future__ import annotations

from collections.abc import Sequence

from uavgnn.algorithms.base import Algorithm
from uavgnn.algorithms.env_policy import PRODUCT as ENVIRONMENT_POLICY
from uavgnn.algorithms.registry import DEFAULTS, algorithms
from uavgnn.reporting.figures import Metrics, Score
from uavgnn.runs.record import Run


def algorithm_of(run: Run) -> type[Algorithm] | None:
    """The algorithm a run trained, by its recorded config (one without ``algorithm.name``: the default, as for a
    checkpoint); None where no config was read or its algorithm is not registered here."""
    return algorithms().get(run.config.get("algorithm.name", DEFAULTS["algorithm"])) if run.config else None


def metrics_of(runs: list[Run]) -> Metrics:
    """What the runs' algorithms declare, in the order of the runs (a figure two declare: the first one's
    direction); runs none of which names a registered algorithm: the default algorithm's."""
    declared = dict.fromkeys(a.compared for run in runs if (a := algorithm_of(run)) is not None)
    shown = list(declared) or [algorithms()[DEFAULTS["algorithm"]].compared]
    scores: dict[str, Score] = {}
    for compared in shown:
        for score in compared.final:
            scores.setdefault(score.key, score)
    return Metrics(
        {key: not score.minimize for key, score in scores.items()},
        tuple(dict.fromkeys(key for compared in shown for key in compared.bars)),
        tuple(dict.fromkeys(c.curve for c in shown)),
        tuple(dict.fromkeys(c.speed for c in shown)),
        scores,
        _name(runs),
    )


def _name(runs: list[Run]) -> str:
    """What names runs that differ by nothing but their seed: their algorithm (all runs: the same one)."""
    names = {str(r.config.get("algorithm.name", DEFAULTS["algorithm"])) for r in runs if r.config}
    return names.pop() if len(names) == 1 else "all runs"


def environment_policy_runs(runs: Sequence[Run]) -> list[Run]:
    """The finished runs whose algorithm trains an environment policy (``produces``)."""
    return [
        r for r in runs if r.status == "ok" and (a := algorithm_of(r)) is not None and a.produces == ENVIRONMENT_POLICY
    ]
