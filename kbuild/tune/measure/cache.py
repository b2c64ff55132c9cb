"""The evaluation cache: a candidate whose machine code was already judged is not run again.

:class:`CachedBackend` wraps any :class:`~kbuild.tune.measure.backend.Backend`. Entries are keyed
by the loaded kernel (spec, config, baseline digest) and a digest of the candidate: by default
sha256 of its ``.text`` sections (:func:`kbuild.tune.measure.cubin.text_digest`, so candidates
that differ only in metadata share an entry); pass ``digest=`` to use another (e.g. the sass
engine's schedule digest).

* ``check``: an invalid verdict is final; a valid one is reused when it covered at least ``k``
  input sets, otherwise the candidate is checked again with the larger ``k``.
* ``time``: the first valid timing is reused (``rounds``/``reps`` of later calls are ignored);
  failed timings are not cached, except that a candidate known invalid is never timed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .backend import K_SEARCH, Backend, CheckResult, KernelRef, LoadInfo, TimeResult
from .cubin import CubinFormatError, cubin_digest, text_digest


def default_digest(cubin: bytes) -> str:
    try:
        return "text:" + text_digest(cubin)
    except CubinFormatError:
        return "bytes:" + cubin_digest(cubin)


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


class CachedBackend:
    """A :class:`Backend` that remembers verdicts per (kernel, candidate digest)."""

    def __init__(self, inner: Backend, *, digest: Callable[[bytes], str] = default_digest) -> None:
        self.inner = inner
        self.name = inner.name
        self.digest = digest
        self.stats = CacheStats()
        self._checks: dict[tuple[str, str], CheckResult] = {}
        self._times: dict[tuple[str, str], TimeResult] = {}
        self._kernel_key = ""

    def load(self, kernel: KernelRef, baseline: bytes) -> LoadInfo:
        info = self.inner.load(kernel, baseline)
        self._kernel_key = f"{kernel.spec}|{kernel.config}|{kernel.small}|{info.baseline_digest}"
        return info

    def _key(self, candidate: bytes) -> tuple[str, str]:
        return (self._kernel_key, self.digest(candidate))

    def _hit(self, kind: str) -> None:
        self.stats.hits += 1
        self.stats.by_kind[kind] = self.stats.by_kind.get(kind, 0) + 1

    def check(self, candidate: bytes, k: int = K_SEARCH, *, seed: int | None = None) -> CheckResult:
        key = self._key(candidate)
        known = self._checks.get(key)
        if known is not None and (not known.valid or known.k >= k):
            self._hit("check")
            return known
        self.stats.misses += 1
        result = self.inner.check(candidate, k, seed=seed)
        self._checks[key] = result
        return result

    def time(self, candidate: bytes, *, rounds: int = 8, reps: int = 10) -> TimeResult:
        key = self._key(candidate)
        known = self._times.get(key)
        if known is not None:
            self._hit("time")
            return known
        verdict = self._checks.get(key)
        if verdict is not None and not verdict.valid:
            self._hit("time")
            return TimeResult.invalid(self.name, f"known invalid: {verdict.reason}")
        self.stats.misses += 1
        result = self.inner.time(candidate, rounds=rounds, reps=reps)
        if result.valid:
            self._times[key] = result
        return result

    def __len__(self) -> int:
        return len({*self._checks, *self._times})

    def close(self) -> None:
        self.inner.close()
