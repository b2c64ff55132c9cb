"""The evaluation cache, the statistics and the small cubin reader."""

from __future__ import annotations

import numpy as np
import pytest

from kbuild.device import stats
from kbuild.tune.measure.backend import GPU_BACKEND, CheckResult, KernelRef, LoadInfo, TimeResult
from kbuild.tune.measure.cache import CachedBackend
from kbuild.tune.measure.cubin import (
    CubinFormatError,
    cubin_arch,
    text_bytes,
    text_digest,
    text_sections,
    without_reuse,
    without_waits,
)


class Counting:
    """An in-process backend that counts what it was asked."""

    name = GPU_BACKEND

    def __init__(self, bad: set[bytes] | None = None) -> None:
        self.bad = bad or set()
        self.checks: list[tuple[bytes, int]] = []
        self.times: list[bytes] = []

    def load(self, kernel: KernelRef, baseline: bytes) -> LoadInfo:
        return LoadInfo(backend=self.name, kernel=kernel.spec, arch=90, baseline_digest="b")

    def check(self, candidate: bytes, k: int = 3, *, seed: int | None = None) -> CheckResult:
        self.checks.append((candidate, k))
        return CheckResult(valid=candidate not in self.bad, backend=self.name, k=k, reason="bad" if candidate in
                           self.bad else None)

    def time(self, candidate: bytes, *, rounds: int = 8, reps: int = 10) -> TimeResult:
        self.times.append(candidate)
        return TimeResult(backend=self.name, ratio=0.9, ci=(0.88, 0.92), aa_ratio=1.0, aa_ci=(0.99, 1.01),
                          baseline_ms=1.0, candidate_ms=0.9)

    def close(self) -> None:
        pass


def test_cache_keys_by_text_bytes(cubins: dict[int, bytes]) -> None:
    inner = Counting()
    cached = CachedBackend(inner)
    cached.load(KernelRef("k:s"), cubins[90])
    base = cubins[90]
    assert cached.check(base).valid
    assert cached.check(base + b"trailing metadata").valid  # same .text: a hit
    assert len(inner.checks) == 1
    assert cached.check(base, k=10).valid  # a stronger check than the cached one: runs again
    assert [k for _, k in inner.checks] == [3, 10]
    assert cached.check(base, k=3).valid and len(inner.checks) == 2
    other, n = without_reuse(base)
    assert n > 0 and text_digest(other) != text_digest(base)
    cached.check(other)
    assert len(inner.checks) == 3
    t1 = cached.time(base)
    t2 = cached.time(base)
    assert t1 is t2 and len(inner.times) == 1
    assert t1.significant


def test_invalid_verdict_is_final_and_never_timed(cubins: dict[int, bytes]) -> None:
    broken, _ = without_waits(cubins[90])
    inner = Counting(bad={broken})
    cached = CachedBackend(inner)
    cached.load(KernelRef("k:s"), cubins[90])
    assert not cached.check(broken).valid
    assert not cached.check(broken, k=10).valid
    assert not cached.time(broken).valid
    assert len(inner.checks) == 1 and inner.times == []


def test_custom_digest_and_kernel_scoping(cubins: dict[int, bytes]) -> None:
    inner = Counting()
    cached = CachedBackend(inner, digest=lambda b: "same")
    cached.load(KernelRef("k:one"), cubins[90])
    cached.check(b"x")
    cached.check(b"y")
    assert len(inner.checks) == 1
    cached.load(KernelRef("k:two"), cubins[90])
    cached.check(b"x")
    assert len(inner.checks) == 2


def test_cubin_reader(cubins: dict[int, bytes]) -> None:
    assert cubin_arch(cubins[90]) == 90 and cubin_arch(cubins[80]) == 80
    secs = text_sections(cubins[90])
    assert [s.name for s in secs] == [".text.softmax_rows"]
    assert len(text_bytes(cubins[90])) == secs[0].size and secs[0].size % 16 == 0
    with pytest.raises(CubinFormatError):
        cubin_arch(b"MZ not an elf" + b"\0" * 64)
    no_waits, changed = without_waits(cubins[90])
    assert changed > 0 and len(no_waits) == len(cubins[90])
    assert no_waits[: secs[0].offset] == cubins[90][: secs[0].offset]


def test_ratio_ci_brackets_a_known_ratio() -> None:
    rng = np.random.default_rng(1)
    base = (1.0 + 0.01 * rng.standard_normal((8, 10))).tolist()
    cand = (0.9 * (1.0 + 0.01 * rng.standard_normal((8, 10)))).tolist()
    ratio, lo, hi = stats.ratio_ci(base, cand)
    assert lo <= ratio <= hi
    assert 0.88 < lo and hi < 0.92
    same, slo, shi = stats.ratio_ci(base, base)
    assert same == slo == shi == 1.0
    with pytest.raises(ValueError):
        stats.ratio_ci(base, cand[:3])


def test_spread() -> None:
    assert stats.spread([1.0, 1.0, 1.0]) == 0.0
    assert stats.spread([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(2.0 / 3.0)


def test_evaluate_times_only_valid_candidates(cubins: dict[int, bytes]) -> None:
    from kbuild.tune.measure import K_ACCEPT, evaluate

    broken, _ = without_waits(cubins[90])
    inner = Counting(bad={broken})
    bad = evaluate(inner, broken)
    assert not bad.faster and bad.time is None and inner.times == []
    good = evaluate(inner, cubins[90], accept=True)
    assert good.faster and inner.checks[-1] == (cubins[90], K_ACCEPT)
    assert good.as_dict()["faster"] is True
