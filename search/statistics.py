"""The spread of dev scores: mean, standard deviation and expected validation performance.

One fine-tuning run is one draw: the same settings with another seed move dev scores by points on
the small GLUE tasks. Dodge et al. (2019, "Show Your Work") summarise N finished runs by the
expected best dev score among k of them drawn at random (with replacement) from the N, for
k = 1..N: with the scores sorted, v_1 <= ... <= v_N,

    P(best of k is v_i) = (i/N)^k - ((i-1)/N)^k,    E[best of k] = sum_i v_i P(best of k is v_i),

and the variance sum_i (v_i - E)^2 P(best of k is v_i). E[best of 1] is the mean; E[best of N]
tends to the maximum as N grows. For a loss (lower is better) the best is the smallest.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np


def expected_best(scores, k: int, lower_is_better: bool = False) -> tuple[float, float]:
    """(expected value, standard deviation) of the best of `k` draws from `scores`."""
    values = np.sort(np.asarray(scores, dtype=np.float64))
    if lower_is_better:
        values = -values[::-1]
    n = len(values)
    if n == 0 or k < 1:
        raise ValueError("expected_best needs scores and k >= 1")
    i = np.arange(1, n + 1, dtype=np.float64)
    p = (i / n) ** k - ((i - 1) / n) ** k
    mean = float(np.sum(values * p))
    std = math.sqrt(max(0.0, float(np.sum((values - mean) ** 2 * p))))
    return (-mean if lower_is_better else mean), std


def expected_best_curve(scores, lower_is_better: bool = False) -> list[tuple[int, float, float]]:
    """(k, expected best of k, its standard deviation) for k = 1..len(scores)."""
    return [(k, *expected_best(scores, k, lower_is_better)) for k in range(1, len(scores) + 1)]


@dataclasses.dataclass
class Spread:
    """Finished runs of one configuration."""

    n: int
    mean: float
    std: float  # sample standard deviation (n - 1); 0 for one run
    low: float
    high: float
    expected_best: list  # E[best of k], k = 1..n


def spread(scores, lower_is_better: bool = False) -> Spread:
    values = np.asarray(scores, dtype=np.float64)
    return Spread(n=len(values), mean=float(values.mean()),
                  std=float(values.std(ddof=1)) if len(values) > 1 else 0.0,
                  low=float(values.min()), high=float(values.max()),
                  expected_best=[e for _, e, _ in expected_best_curve(values, lower_is_better)])
