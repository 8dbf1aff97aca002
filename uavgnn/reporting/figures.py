"""How reports show a figure: a final metric's direction, label, unit and bounds (``Score``), a curve over the
steps (``Curve``), what an algorithm's runs are compared by (``Compared``), and what one comparison shows of its
runs (``Metrics``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from uavgnn.infrastructure.errors import ConfigError


@dataclass(frozen=True)
class Score:
    """The validation metric that selects ``best.pt``: its key in the validation results and its direction. As one
    of ``Compared.final``, also how reports show it: ``label`` (a readable name; default: the key), ``percent``
    (a fraction shown x 100, "%": gaps and shares) and ``bounds``, the values it can take by definition (as
    recorded; no interval a report gives leaves them)."""

    key: str
    minimize: bool = True
    label: str = ""
    percent: bool = False
    bounds: tuple[float, float] = (-math.inf, math.inf)

    @property
    def worst(self) -> float:
        return math.inf if self.minimize else -math.inf

    def improves(self, value: float, best: float, tolerance: float = 1e-6) -> bool:
        return value < best - tolerance if self.minimize else value > best + tolerance


ZERO_UP = (0.0, math.inf)  # Score.bounds: errors, gaps to an optimum, counts, speeds, memory


SHARE = (0.0, 1.0)  # Score.bounds: a share of a whole (completion)


UP_TO_ONE = (-math.inf, 1.0)  # Score.bounds: a share of an error removed (1: all of it)


@dataclass(frozen=True)
class Curve:
    """A key of a run's history (``metrics.jsonl``) drawn over the steps, with its axis label; ``percent``: a
    fraction drawn x 100 (its label says "%")."""

    key: str
    label: str
    percent: bool = False


@dataclass(frozen=True)
class Compared:
    """What ``mode=compare`` shows of an algorithm's runs: its final figures with their directions (keys of
    ``summary.json``; ``<unit>_per_s`` and ``peak_mem_mb`` are the median speed and the peak memory in the run's
    ``perf/`` history), those drawn as bars, and its learning curve and throughput drawn over the steps."""

    final: tuple[Score, ...]
    bars: tuple[str, ...]  # keys of ``final``
    curve: Curve
    speed: Curve


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
    name: str = field(default="all runs", compare=False)  # what names runs that differ only by seed: their algorithm

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
