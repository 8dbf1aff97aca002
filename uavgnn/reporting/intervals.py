"""The 95% intervals the reports give: of a seed group's mean, and of an aggregate over runs and tasks.

``mean_interval`` (the tables of ``mode=compare``), by ``compare.interval``, from 3 values on:

- ``auto`` (default): Student's t where its interval lies inside the metric's range (``Score.bounds``); otherwise
  the percentile bootstrap of the mean, whose ends are means of resampled values and so never leave the observed
  range.
- ``t``: Student's t where it lies inside the range, else none ("n/a"): an interval that leaves the metric's
  range - a gap below 0, a share above 100% - is not given, clipped or otherwise.
- ``bootstrap``: the percentile bootstrap.

With 2 values, whatever the method: their range, [the smaller, the larger], labelled as the range it is (the
bootstrap's "interval" of 2 values is that range, and Student's t with one degree of freedom is 12.7 standard
errors wide: neither is a 95% interval worth the name); so is a bootstrap that comes out as the values' range (of
3 values, each extreme is a whole 1/27 of the resamples: the percentiles land on them); with 1 value there is
none ("n/a").

``iqm`` and ``stratified_bootstrap`` (the MARL aggregate) are rliable's (Agarwal et al. 2021, "Deep RL at the
Edge of the Statistical Precipice"; what marl-eval reports): the interquartile mean of every run's score on every
task (the mean of the middle 50%, ``scipy.stats.trim_mean(x, 0.25)``), and its 95% interval from resampling the
runs with replacement within each task (stratified bootstrap, percentile method), written here in numpy: rliable
pins ``arch`` and pulls seaborn for these few lines.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import stdtrit

CONFIDENCE = 0.95
RESAMPLES = 10_000  # bootstrap resamples: the interval's ends move by well under 1% of its width between seeds
SEED = 0  # the resampling is fixed: the same runs give the same report
METHODS = ("auto", "t", "bootstrap")


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    method: str  # "t" (Student's t) | "bootstrap" (percentile bootstrap) | "range" (the values' min and max)


def mean_interval(
    values: Sequence[float], bounds: tuple[float, float] = (-math.inf, math.inf), method: str = "auto"
) -> Interval | None:
    """The 95% interval of the mean of ``values`` by the rule of ``method`` (the module's docstring), or with 2
    values their range; None: no valid interval (1 value; ``t`` leaving ``bounds``)."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2:
        return None
    if len(x) < 3:
        return Interval(float(x.min()), float(x.max()), "range")
    if method in ("auto", "t"):
        half = ci95(float(np.std(x, ddof=1)), len(x))
        mean = float(np.mean(x))
        if bounds[0] <= mean - half and mean + half <= bounds[1]:
            return Interval(mean - half, mean + half, "t")
        if method == "t":
            return None
    means = x[np.random.default_rng(SEED).integers(0, len(x), (RESAMPLES, len(x)))].mean(axis=1)
    low, high = np.percentile(means, [50 * (1 - CONFIDENCE), 50 * (1 + CONFIDENCE)]).clip(
        x.min(), x.max()
    )  # float noise
    if low == x.min() and high == x.max():  # 3 values: each extreme is 1/27 of the resamples, over 2.5%
        return Interval(float(low), float(high), "range")
    return Interval(float(low), float(high), "bootstrap")


def iqm(scores: np.ndarray) -> np.ndarray:
    """The interquartile mean over the last axis (rliable's ``aggregate_iqm``: ``trim_mean(x, 0.25)``, which cuts
    ``int(0.25 n)`` values from each end)."""
    ordered = np.sort(scores, axis=-1)
    cut = int(0.25 * ordered.shape[-1])
    return ordered[..., cut : ordered.shape[-1] - cut].mean(axis=-1)


def stratified_bootstrap(
    tasks: Sequence[Sequence[float]], statistic: Callable[[np.ndarray], np.ndarray] = iqm
) -> tuple[float, Interval]:
    """``statistic`` of every run's score on every task (``tasks``: one list of run scores per task, as many runs
    each as it has) and its 95% interval: each resample draws every task's runs with replacement from that task's
    own (rliable's ``StratifiedBootstrap``), the percentile method."""
    rng = np.random.default_rng(SEED)
    columns = [np.asarray(t, dtype=np.float64) for t in tasks]
    point = float(statistic(np.concatenate(columns)))
    resampled = np.concatenate([c[rng.integers(0, len(c), (RESAMPLES, len(c)))] for c in columns], axis=1)
    low, high = np.percentile(statistic(resampled), [50 * (1 - CONFIDENCE), 50 * (1 + CONFIDENCE)])
    return point, Interval(float(low), float(high), "stratified bootstrap")


def ci95(std: float, n: int) -> float:
    """Half-width of the 95% interval of a mean of ``n`` values of standard deviation ``std`` (Student's t;
    its quantile from ``scipy.special``: ``scipy.stats`` would add ~0.5 s to every program's start)."""
    return float(stdtrit(n - 1, 0.975)) * std / math.sqrt(n)
