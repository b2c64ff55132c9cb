"""Judging a schedule: budgets, and evaluators that turn a :class:`~kbuild.sass.schedule.Schedule`
into "valid? how fast relative to the baseline?".

* :class:`Budget` counts backend evaluations and wall seconds; every search stops at whichever
  runs out first. Evaluations answered from the evaluation cache are free.
* :class:`BackendEvaluator` writes the candidate cubin and asks a measurement backend
  (:mod:`kbuild.tune.measure`: the GPU worker, or the cost model through cubins) to ``check`` it
  on K input sets, then ``time`` it.
* :class:`ModelEvaluator` scores the schedule's current order and stall counts directly with
  the CPU cost model, without writing a cubin: fast, deterministic, and labelled an estimate. Each
  instruction's latency class and each class's cycles come from the schedule's ISA table
  (:mod:`kbuild.sass.isa`), as in the cost model's own decoder.

``ratio`` is candidate time over baseline time: below 1 is faster.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from kbuild.tune.measure.backend import K_SEARCH, MODEL_BACKEND, Backend
from kbuild.tune.measure.model import Instr, estimate_cycles, latency_class


class BudgetExhausted(Exception):
    """Raised by :meth:`Budget.charge` when no evaluation is left."""


@dataclass
class Budget:
    """Evaluations and seconds; whichever runs out first ends the search."""

    evaluations: int
    seconds: float
    used: int = 0
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        if self.evaluations <= 0:
            raise ValueError(f"budget evaluations must be positive, got {self.evaluations}")
        if self.seconds <= 0:
            raise ValueError(f"budget seconds must be positive, got {self.seconds}")

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def exhausted(self) -> bool:
        return self.used >= self.evaluations or self.elapsed >= self.seconds

    def charge(self) -> None:
        if self.exhausted:
            raise BudgetExhausted
        self.used += 1


@dataclass(frozen=True)
class Evaluation:
    valid: bool
    ratio: float
    """Candidate time / baseline time (nan when invalid)."""
    backend: str
    cached: bool = False
    reason: str | None = None
    ci: tuple[float, float] | None = None


class Evaluator(Protocol):
    name: str
    budget: Budget

    def evaluate(self, schedule: Any) -> Evaluation: ...


def schedule_digest(schedule: Any) -> str:
    """Identity of a schedule's machine code: instruction order plus stall counts, plus the yield bits and reuse
    flags when a control-code edit changed them (issue 15; nothing is added otherwise, so digests of move-only
    schedules are unchanged)."""
    h = hashlib.sha256()
    h.update(np.asarray(schedule.order, dtype=np.int64).tobytes())
    h.update(np.asarray(schedule.stall, dtype=np.int64).tobytes())
    control_state = getattr(schedule, "control_state", None)
    if control_state is not None:
        h.update(control_state())
    return h.hexdigest()


class _Memo:
    """Evaluations by schedule digest: a schedule seen before is answered free, without charging the budget."""

    def __init__(self) -> None:
        self.results: dict[str, Evaluation] = {}
        self.hits = 0

    def evaluate(self, schedule: Any, budget: Budget, measure: Callable[[], Evaluation]) -> Evaluation:
        key = schedule_digest(schedule)
        found = self.results.get(key)
        if found is not None:
            self.hits += 1
            return Evaluation(found.valid, found.ratio, found.backend, True, found.reason, found.ci)
        budget.charge()
        result = self.results[key] = measure()
        return result


class ModelEvaluator:
    """The CPU cost model applied to the schedule state (no cubin written). Deterministic.

    Latency classes and their cycles are the schedule's architecture's (``analysis.spec``), the same
    :func:`~kbuild.tune.measure.model.latency_class` the cost model's decoder uses, so the two estimates of
    one cubin agree."""

    name = MODEL_BACKEND

    def __init__(self, schedule: Any, budget: Budget, *, warps: int = 4) -> None:
        an = schedule.analysis
        self.budget = budget
        self.warps = warps
        self._opcodes = [ins.opcode for ins in an.instructions]
        self._classes = [latency_class(ins.opcode, an.spec) for ins in an.instructions]
        self._latencies = dict(an.spec.latencies)
        self._sems = an.sems
        self._memo = _Memo()
        self.baseline_cycles = self._cycles(np.arange(an.n), np.array([s.stall for s in an.sems]))

    def _cycles(self, order: np.ndarray, stall: np.ndarray) -> int:
        instrs = [Instr(opcode=self._opcodes[i], stall=int(stall[i]), latency_class=self._classes[i],
                        write_barrier=self._sems[i].wbar, read_barrier=self._sems[i].rbar,
                        wait_mask=self._sems[i].wait) for i in order.tolist()]
        return estimate_cycles(instrs, warps=self.warps, latencies=self._latencies)

    def evaluate(self, schedule: Any) -> Evaluation:
        def measure() -> Evaluation:
            cycles = self._cycles(np.asarray(schedule.order), np.asarray(schedule.stall))
            return Evaluation(True, float(cycles / max(self.baseline_cycles, 1)), self.name)

        return self._memo.evaluate(schedule, self.budget, measure)

    @property
    def cache_hits(self) -> int:
        return self._memo.hits


class BackendEvaluator:
    """Write the candidate cubin and ask a measurement backend: check on K inputs, then time."""

    def __init__(self, backend: Backend, budget: Budget, *, k: int = K_SEARCH, rounds: int = 5, reps: int = 10,
                 seed: int = 0) -> None:
        self.backend = backend
        self.name = backend.name
        self.budget = budget
        self.k = k
        self.rounds = rounds
        self.reps = reps
        self.seed = seed
        self._memo = _Memo()

    def evaluate(self, schedule: Any) -> Evaluation:
        return self._memo.evaluate(schedule, self.budget, lambda: self._measure(schedule))

    def _measure(self, schedule: Any) -> Evaluation:
        # Moves are legal by construction; the independent verifier runs at acceptance.
        cubin = schedule.to_cubin(verify=False, disassemble_check=False)
        self.seed += 1
        chk = self.backend.check(cubin, self.k, seed=self.seed)
        if not chk.valid:
            return Evaluation(False, float("nan"), self.name, reason=chk.reason)
        t = self.backend.time(cubin, rounds=self.rounds, reps=self.reps)
        return Evaluation(t.valid, float(t.ratio), self.name, reason=t.reason, ci=t.ci)

    @property
    def cache_hits(self) -> int:
        return self._memo.hits
