"""A TEST FAKE standing in for the GPU: a synthetic, noisy timing landscape over a 144-point grid.

Nothing here is a measurement. The landscape has a known optimum, and points that fail to compile,
fail to launch (out of shared memory), or give wrong results; one wrong-result point is the fastest
of all, so a searcher that picks it is caught. Timings get multiplicative noise per launch and a
drift that every configuration of a round shares (as clock or power drift would on a GPU), so only
comparisons inside one interleaved batch are fair.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kbuild.bench.spec import BenchSpec, Config
from kbuild.tune.level1.measurer import Prepared, TimedBatch

BACKEND = "synthetic landscape (test fake, not a measurement)"

BLOCKS = (32, 64, 128, 256)
WARPS = (2, 4, 8)
STAGES = (2, 3, 4)


def cfg(m: int, n: int, w: int, s: int) -> Config:
    return Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)


SPACE = [cfg(m, n, w, s) for m in BLOCKS for n in BLOCKS for w in WARPS for s in STAGES]
AUTOTUNE = [cfg(64, 64, 4, 3), cfg(128, 64, 4, 3), cfg(64, 128, 4, 4), cfg(32, 32, 2, 2)]
#: The fastest point of all, but it computes the wrong result.
FAST_BUT_WRONG = cfg(64, 128, 4, 2)


def fate(c: Config) -> str:
    m, n = int(c.constexprs["BLOCK_M"]), int(c.constexprs["BLOCK_N"])
    if m == 256 and n == 256 and c.num_warps == 2:
        return "compile-error"
    if c.num_stages == 4 and m * n >= 128 * 256:
        return "launch-error"
    if n > m and c.num_stages == 2:
        return "wrong-result"
    return "ok"


def true_ms(c: Config) -> float:
    """The noiseless time of a configuration (ms); smooth in log2 of each dimension."""
    if c.label() == FAST_BUT_WRONG.label():
        return 0.5
    m, n = math.log2(int(c.constexprs["BLOCK_M"])), math.log2(int(c.constexprs["BLOCK_N"]))
    w, s = math.log2(c.num_warps), c.num_stages
    tile = m + n
    return 1.0 * (1 + 0.07 * (m - 7) ** 2 + 0.05 * (n - 7.4) ** 2 + 0.06 * (w - (tile - 11)) ** 2
                  + 0.04 * (s - 3) ** 2 + 0.02 * (m - n) * (s - 3))


def optimum() -> tuple[Config, float]:
    ok = [c for c in SPACE if fate(c) == "ok"]
    best = min(ok, key=true_ms)
    return best, true_ms(best)


def spec() -> BenchSpec:
    """A bench spec carrying only what the searcher reads (space and autotune list); nothing launches it."""
    return BenchSpec(name="synthetic", fn=None, signature={}, constexprs={}, configs=AUTOTUNE,
                     make_inputs=lambda seed, device: {}, grid=lambda c: (1, 1, 1), outputs={}, flops=0.0,
                     bytes_moved=1.0, space=SPACE)


class FakeMeasurer:
    """:class:`~kbuild.tune.level1.measurer.ConfigMeasurer` over the synthetic landscape (TEST FAKE)."""

    backend = BACKEND

    def __init__(self, seed: int, *, noise: float = 0.02, drift: float = 0.05) -> None:
        self.rng = np.random.default_rng(seed)
        self.noise = noise
        self.drift = drift
        self.rounds_so_far = 0
        self.prepared: list[str] = []
        self.timed: list[tuple[list[str], int, int]] = []
        self.prefetched: list[str] = []

    def prefetch(self, configs: Sequence[Config]) -> None:
        self.prefetched.extend(c.label() for c in configs)

    def prepare(self, config: Config) -> Prepared:
        self.prepared.append(config.label())
        status: Any = fate(config)
        if status == "ok":
            return Prepared("ok", 0.0, 1e-3)
        if status == "wrong-result":
            return Prepared("wrong-result", 0.0, 0.5, "relative error 0.5 > 0.02 (synthetic)")
        return Prepared(status, 0.0, None, f"{status} (synthetic)")

    def time(self, configs: Sequence[Config], *, rounds: int, reps: int) -> TimedBatch:
        for c in configs:
            assert fate(c) == "ok", f"timed a failing configuration {c.label()}"
        self.timed.append(([c.label() for c in configs], rounds, reps))
        out: dict[str, list[list[float]]] = {c.label(): [] for c in configs}
        for _ in range(rounds):
            d = 1.0 + self.drift * math.sin(self.rounds_so_far / 3.0)
            self.rounds_so_far += 1
            for c in configs:
                noise = self.rng.lognormal(0.0, self.noise, size=reps)
                out[c.label()].append([float(x) for x in true_ms(c) * d * noise])
        return TimedBatch(out)

    def close(self) -> None:
        pass
