"""What ``mode=compare`` shows of its runs: what each run's algorithm declares (``Algorithm.compared``), found by
the name in the run's recorded config; runs of several algorithms: each one's figures and curves, side by side."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from uavgnn.algorithms import DEFAULTS, algorithms
from uavgnn.algorithms.base import Algorithm, Curve, Score
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.runs.record import Run


@dataclass(frozen=True)
class Metrics:
    """What a comparison shows: the final metrics (True: higher is better), those drawn as bars, and the history
    keys drawn over the steps (the learning curves, the throughputs) with their labels; ``scores``: each final
    metric's declaration (its readable label, whether it is a percentage, its bounds)."""

    final: dict[str, bool]
    panels: tuple[str, ...]
    curves: tuple[Curve, ...]
    speeds: tuple[Curve, ...]
    scores: dict[str, Score] = field(default_factory=dict)

    def label(self, key: str) -> str:
        """How tables and pictures name a metric: its declared label (else its key), with its unit (%)."""
        score = self.scores.get(key, Score(key))
        return f"{score.label or key}{' (%)' if score.percent else ''}"

    def scale(self, key: str) -> float:
        """What a recorded value is multiplied by to be shown: 100 for a percentage (a recorded fraction)."""
        return 100.0 if self.scores.get(key, Score(key)).percent else 1.0

    def bounds(self, key: str) -> tuple[float, float]:
        return self.scores.get(key, Score(key)).bounds

    def only(self, keys: list[str]) -> Metrics:
        """These final metrics alone, in this order (``compare.metrics``); [] keeps every one."""
        if not keys:
            return self
        unknown = [k for k in keys if k not in self.final]
        if unknown:
            raise ConfigError(
                f"compare.metrics: {', '.join(unknown)} not among the runs' final metrics: {', '.join(self.final)}"
            )
        return replace(
            self,
            final={k: self.final[k] for k in keys},
            panels=tuple(k for k in keys if k in self.panels) or tuple(keys),
        )


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
    )


IGNORED_PREFIXES = ("hydra", "data.cache_dir", "ckpt", "path")


def differing_keys(runs: list[Run]) -> list[str]:
    """Config keys whose values are not the same in every run (hydra/path settings ignored)."""
    keys = sorted({k for r in runs for k in r.config if not k.startswith(IGNORED_PREFIXES)})
    return [k for k in keys if len({json.dumps(r.config.get(k), default=str) for r in runs}) > 1]


def label_parts(runs: list[Run], keys: list[str]) -> list[list[tuple[str, str]]]:
    """What each run's seed group shares, as the user chose it, as (key, value) pairs: the command-line overrides
    that differ between runs, seed aside (``model=tiny``, ``optim.amp=true``); runs without their overrides (or
    whose overrides do not tell them apart): every differing config key but the seed (``model.name=tiny``)."""
    by_key = [dict(o.split("=", 1) for o in r.overrides if "=" in o) for r in runs]
    varied = sorted({k for o in by_key for k in o if k != "seed" and len({d.get(k) for d in by_key}) > 1})
    from_config = [[(k, str(r.config.get(k))) for k in keys if k != "seed"] for r in runs]
    from_overrides = [[(k, o[k]) for k in varied if k in o] for o in by_key]
    as_text = [
        [", ".join(f"{k}={v}" for k, v in parts) for parts in labels] for labels in (from_config, from_overrides)
    ]
    distinct = len(set(zip(*as_text))) == len(set(as_text[1]))
    return from_overrides if all(r.overrides for r in runs) and distinct else from_config


def group_labels(runs: list[Run], keys: list[str]) -> list[str]:
    """``label_parts`` as text: ``model=tiny, optim.amp=true`` (runs that differ by seed alone: empty)."""
    return [", ".join(f"{k}={v}" for k, v in parts) for parts in label_parts(runs, keys)]
