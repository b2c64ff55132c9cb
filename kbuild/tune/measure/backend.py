"""The measurement interface: ``load`` a kernel's baseline, then ``check`` and ``time`` candidates.

Two implementations: :class:`kbuild.tune.measure.client.WorkerClient` (a GPU worker process) and
:class:`kbuild.tune.measure.model.CostModel` (a CPU estimate). :class:`kbuild.tune.measure.cache.CachedBackend`
wraps either with the evaluation cache. Results are plain frozen dataclasses with ``as_dict()``
for JSON; every result names the backend that produced it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

#: Label on every result of the GPU worker.
GPU_BACKEND = "gpu-worker"
#: Label on every result of the cost model.
MODEL_BACKEND = "cost-model (CPU estimate, not a measurement)"

#: K for ``check`` while searching, and before anything is accepted.
K_SEARCH = 3
K_ACCEPT = 10


@dataclass(frozen=True)
class KernelRef:
    """What ``load`` needs to find and launch a kernel: its bench spec and the configuration."""

    spec: str
    """Bench spec reference, ``package.module:callable``."""
    config: int | dict[str, Any] = 0
    """The configuration the baseline was compiled with: an index into the spec's autotune list, or any point of
    its level-1 space as :meth:`kbuild.bench.spec.Config.as_dict` gives it."""
    small: bool = False
    """Ask the spec for its reduced problem size."""
    python_path: tuple[str, ...] = ()
    """Directories to put on ``sys.path`` before importing ``spec``."""
    symbol: str | None = None
    """A CUDA C++ kernel: the ``__global__`` function's (mangled) symbol in the cubin; ``spec`` then names a
    :class:`kbuild.bench.cuda.CudaBenchSpec` and ``config`` is unused (:mod:`.cuda_session`)."""


@dataclass(frozen=True)
class LoadInfo:
    backend: str
    kernel: str
    arch: int
    baseline_digest: str
    device: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class CheckResult:
    """Whether a candidate computes exactly what the untouched baseline computes."""

    valid: bool
    backend: str
    k: int = 0
    """Input sets checked (0 when the candidate failed before or without running)."""
    reason: str | None = None
    """Why the candidate is invalid (fault, hang, mismatch, guard band, wrong architecture ...)."""
    executed: bool = True
    """False when nothing ran (the cost model): ``valid`` is then a static pre-screen only."""
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class TimeResult:
    """Candidate time over baseline time (below 1 is faster), with an A/A control from the same call."""

    backend: str
    ratio: float
    """median(candidate) / median(baseline)."""
    ci: tuple[float, float]
    """Bootstrap confidence interval of ``ratio`` (95 %)."""
    aa_ratio: float
    """median(baseline, second copy) / median(baseline): what "no change" looks like right now."""
    aa_ci: tuple[float, float]
    baseline_ms: float
    candidate_ms: float
    valid: bool = True
    reason: str | None = None
    samples: dict[str, list[list[float]]] = field(default_factory=dict)
    """Raw samples in ms per variant (``baseline``, ``candidate``, ``baseline_aa``), one list per round."""

    @property
    def significant(self) -> bool:
        """The candidate's interval lies entirely below 1 and outside the A/A interval."""
        return self.valid and self.ci[1] < 1.0 and self.ci[1] < self.aa_ci[0]

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["significant"] = self.significant
        return d

    @classmethod
    def invalid(cls, backend: str, reason: str) -> TimeResult:
        nan = float("nan")
        return cls(backend=backend, ratio=nan, ci=(nan, nan), aa_ratio=nan, aa_ci=(nan, nan), baseline_ms=nan,
                   candidate_ms=nan, valid=False, reason=reason)


@runtime_checkable
class Backend(Protocol):
    """load(baseline cubin, spec) / check(candidate, k) / time(candidate).

    ``check`` and ``time`` never raise for a bad candidate: they return a result with
    ``valid=False`` and the reason, and the backend stays usable. They raise only when the
    backend itself cannot work (no GPU, baseline broken, nothing loaded)."""

    name: str

    def load(self, kernel: KernelRef, baseline: bytes) -> LoadInfo: ...

    def check(self, candidate: bytes, k: int = K_SEARCH, *, seed: int | None = None) -> CheckResult:
        """Run baseline and candidate on ``k`` fresh input sets (``seed`` None: new sets on every call)."""
        ...

    def time(self, candidate: bytes, *, rounds: int = 8, reps: int = 10) -> TimeResult:
        """Interleaved timing of baseline, candidate and baseline again (the A/A control)."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Evaluation:
    """A candidate's verdict: the check, and the timing when the check passed."""

    check: CheckResult
    time: TimeResult | None

    @property
    def faster(self) -> bool:
        """Valid, and faster beyond the A/A noise of the same measurement."""
        return self.check.valid and self.time is not None and self.time.significant

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.check.as_dict(), "time": self.time.as_dict() if self.time else None,
                "faster": self.faster}


def evaluate(backend: Backend, candidate: bytes, *, accept: bool = False, rounds: int = 8,
             reps: int = 10) -> Evaluation:
    """Check (K_SEARCH input sets, or K_ACCEPT when ``accept``), then time only a valid candidate."""
    verdict = backend.check(candidate, K_ACCEPT if accept else K_SEARCH)
    if not verdict.valid:
        return Evaluation(verdict, None)
    return Evaluation(verdict, backend.time(candidate, rounds=rounds, reps=reps))
