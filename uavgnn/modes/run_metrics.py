"""What ``mode=compare`` shows of its runs: what each run's algorithm declares (``Algorithm.compared``), found by
the name in the run's recorded config; runs of several algorithms: each one's figures and curves, side by side."""

from __future__ import annotations

from dataclasses import dataclass

from uavgnn.algorithms import DEFAULTS, algorithms
from uavgnn.algorithms.base import Algorithm, Curve
from uavgnn.run_record import Run


@dataclass(frozen=True)
class Metrics:
    """What a comparison shows: the final metrics (True: higher is better), those drawn as bars, and the history
    keys drawn over the steps (the learning curves, the throughputs) with their labels."""

    final: dict[str, bool]
    panels: tuple[str, ...]
    curves: tuple[Curve, ...]
    speeds: tuple[Curve, ...]


def algorithm_of(run: Run) -> type[Algorithm] | None:
    """The algorithm a run trained, by its recorded config (one without ``algorithm.name``: the default, as for a
    checkpoint); None where no config was read or its algorithm is not registered here."""
    return algorithms().get(run.config.get("algorithm.name", DEFAULTS["algorithm"])) if run.config else None


def metrics_of(runs: list[Run]) -> Metrics:
    """What the runs' algorithms declare, in the order of the runs (a figure two declare: the first one's
    direction); runs none of which names a registered algorithm: the default algorithm's."""
    declared = dict.fromkeys(a.compared for run in runs if (a := algorithm_of(run)) is not None)
    shown = list(declared) or [algorithms()[DEFAULTS["algorithm"]].compared]
    final: dict[str, bool] = {}
    for compared in shown:
        for score in compared.final:
            final.setdefault(score.key, not score.minimize)
    return Metrics(final, tuple(dict.fromkeys(key for compared in shown for key in compared.bars)),
                   tuple(dict.fromkeys(c.curve for c in shown)), tuple(dict.fromkeys(c.speed for c in shown)))
