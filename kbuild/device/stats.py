"""Statistics for interleaved timing: medians, ratio of medians, bootstrap confidence intervals.

Samples come in rounds (one round = every variant timed ``reps`` times, interleaved). The
bootstrap resamples whole rounds, which keeps the pairing between variants measured close in time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def median(samples: Sequence[Sequence[float]] | Sequence[float]) -> float:
    return float(np.median(np.asarray(samples, dtype=float).ravel()))


def ratio_ci(base: Sequence[Sequence[float]], cand: Sequence[Sequence[float]], *, n_boot: int = 2000,
             level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """``median(cand) / median(base)`` and its bootstrap interval over rounds.

    ``base[r]`` and ``cand[r]`` are the samples of round ``r``. Returns (ratio, low, high)."""
    b = np.asarray(base, dtype=float)
    c = np.asarray(cand, dtype=float)
    if b.ndim != 2 or c.ndim != 2 or b.shape[0] != c.shape[0] or b.shape[0] == 0:
        raise ValueError("base and cand need the same number of rounds, each a list of samples")
    ratio = float(np.median(c) / np.median(b))
    rounds = b.shape[0]
    if rounds < 2:
        return ratio, ratio, ratio
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, rounds, size=(n_boot, rounds))
    boots = np.median(c[idx].reshape(n_boot, -1), axis=1) / np.median(b[idx].reshape(n_boot, -1), axis=1)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(boots, [alpha, 1.0 - alpha])
    return ratio, float(low), float(high)


def spread(samples: Sequence[float]) -> float:
    """Relative interquartile range: (q75 - q25) / median."""
    a = np.asarray(samples, dtype=float)
    q25, q50, q75 = np.quantile(a, [0.25, 0.5, 0.75])
    return float((q75 - q25) / q50) if q50 else float("nan")
