"""The level-1 searcher: which launch configuration of a kernel's space is fastest on this GPU?

Two methods over :meth:`kbuild.bench.spec.BenchSpec.search_space`, driven through a
:class:`~kbuild.tune.level1.measurer.ConfigMeasurer`:

* ``"exhaustive"``: every configuration is compiled, checked and timed in one interleaved batch of
  ``rounds`` rounds; the fastest median wins;
* ``"racing"``: Optuna's TPE sampler proposes configurations (categorical dimensions for a grid
  space, the index for a list) and successive halving spends the timing budget where it pays:

  1. *screening*: batches of new proposals timed for ``screen_rounds`` round(s) each, interleaved
     with the reference configuration (the default, first entry of the autotune list) and the
     incumbent, so each configuration's score is its time relative to the reference measured in the
     same batch (clock and power drift cancel); the autotune list's entries are in the first batch;
  2. *halving*: the best ``top × eta`` by score, again with the reference, for ``rounds // 4`` rounds;
  3. *final*: the best ``top`` and the autotune list's best, in one batch of ``rounds`` rounds (the
     same as the exhaustive sweep); the fastest median there wins, and the gain over the autotune
     best is read from that batch.

  Compiles run ahead in a process pool: the next screening batch is proposed (Optuna's constant
  liar keeps parallel proposals apart) and its compiles started before the current batch is timed.

One *evaluation* is one configuration timed for one round (``reps`` launches, each after an L2 flush);
``launches`` counts those launches, ``checks`` the correctness runs. The racing budget is
``fraction × len(space) × rounds`` evaluations (the exhaustive sweep's cost when every configuration
works) and is never exceeded, except that it is raised to the minimum the final rung needs (recorded).
Configurations that fail to compile, to launch, hang, or give wrong results are reported per trial and
never chosen; so are those whose cubin has a wgmma register race (status ``"racy"``, found as they compile;
triton-lang/triton#9433), which are not checked or timed either: their outputs depend on timing, so a check can
pass by luck. When the *default* configuration (what ships untuned) is racy, the space is still searched, each
configuration checked against the spec's independent reference (a torch implementation) as always, and the gain
is measured against the best *race-free* entry of the autotune list (``default_races`` and the notes say so): what
ships is then race-free. When the spec has no independent reference (none, or a recorded spec's, which is the
racy configuration's own output) or no entry of the autotune list is race-free and correct, the default is kept
without a search (``decision``): nothing can be verified against outputs that are not defined. (The seventh
session's H100 run kept the suite's rmsnorm_swiglu racy default this way while 26 race-free points of its derived
space were left unsearched.)
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kbuild.bench.spec import BenchSpec, Config
from kbuild.device import stats
from kbuild.errors import UsageError

from .measurer import ConfigMeasurer, Status, TimedBatch
from .space import Space

log = logging.getLogger(__name__)

Method = Literal["racing", "exhaustive"]
Progress = Callable[[dict[str, Any]], None]


@dataclass
class Trial:
    """One configuration of the space as the search saw it."""

    config: Config
    label: str
    status: Status = "ok"
    median_ms: float | None = None
    """Median of every sample it got (all batches); the final decision reads the final batch only."""
    samples_ms: list[list[float]] = field(default_factory=list)
    """Every round it was timed in, ms per launch, in order."""
    rel_err: float | None = None
    compile_s: float | None = None
    error: str | None = None
    autotune: bool = False
    """An entry of the kernel's own autotune list."""
    score: float | None = None
    """Time relative to the reference configuration, from the batches both were in (geometric mean, by rounds)."""
    rounds: int = 0
    batches: int = 0
    details: dict[str, Any] = field(default_factory=dict)
    _log_ratios: list[tuple[float, int]] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "config": self.config.as_dict(), "status": self.status,
                "median_ms": self.median_ms, "score": self.score, "rounds": self.rounds, "batches": self.batches,
                "rel_err": self.rel_err, "compile_s": None if self.compile_s is None else round(self.compile_s, 3),
                "error": self.error, "autotune": self.autotune, "details": dict(self.details),
                "samples_ms": self.samples_ms}


@dataclass(frozen=True)
class Level1Result:
    method: str
    backend: str
    space_size: int
    space_kind: str
    evaluations: int
    launches: int
    checks: int
    compiles: int
    seconds: float
    trials: tuple[Trial, ...]
    best: Config
    best_ms: float
    autotune_best: Config
    autotune_best_ms: float
    top: tuple[Config, ...]
    """The best one to three distinct configurations of the final batch, fastest first (level 2's input)."""
    budget: int
    rounds: int
    reps: int
    seed: int
    notes: tuple[str, ...] = ()
    default_races: tuple[str, ...] = ()
    """The default configuration's wgmma register races: when any, level 1 searched the race-free configurations
    against the best race-free autotune entry, or, when there was none, kept the default without a search (``best``
    is the default, the times are NaN, :attr:`decision` says why)."""

    @property
    def decision(self) -> str | None:
        """Why the default was kept without a search (its cubin is racy and no autotune entry is race-free), else
        None."""
        if not self.default_races or self.method != "none":
            return None
        from kbuild.sass.hazards import WGMMA_RACE_ISSUE, summary

        return (f"default kept: the default configuration {self.best.label()} has a wgmma register race "
                f"({WGMMA_RACE_ISSUE}) at {summary(self.default_races)}; its outputs depend on timing, so no "
                "configuration's gain over it can be verified (none was searched)")

    @property
    def gain(self) -> float:
        """The autotune list's best time over the chosen configuration's, measured in the same batch."""
        return self.autotune_best_ms / self.best_ms

    @property
    def failed(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.trials:
            if t.status != "ok":
                out[t.status] = out.get(t.status, 0) + 1
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.method, "backend": self.backend, "space_size": self.space_size,
                "space_kind": self.space_kind, "evaluations": self.evaluations, "launches": self.launches,
                "checks": self.checks, "compiles": self.compiles, "seconds": round(self.seconds, 2),
                "budget": self.budget, "rounds": self.rounds, "reps": self.reps, "seed": self.seed,
                "best": self.best.as_dict(), "best_label": self.best.label(), "best_ms": _finite(self.best_ms),
                "autotune_best": self.autotune_best.as_dict(), "autotune_best_label": self.autotune_best.label(),
                "autotune_best_ms": _finite(self.autotune_best_ms), "gain": _finite(self.gain),
                "default_racy": bool(self.default_races), "default_races": list(self.default_races),
                "decision": self.decision,
                "top": [c.as_dict() for c in self.top], "top_labels": [c.label() for c in self.top],
                "tried": len(self.trials), "failed": self.failed, "notes": list(self.notes),
                "trials": [t.as_dict() for t in self.trials]}


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


class NoWorkingConfig(UsageError):
    """No configuration of the space compiled, ran and matched the reference."""


class _Run:
    """Book-keeping shared by both methods: trials, measurement, scores, counts."""

    def __init__(self, spec: BenchSpec, measurer: ConfigMeasurer, rounds: int, reps: int,
                 on_progress: Progress | None) -> None:
        self.spec = spec
        self.measurer = measurer
        self.rounds = rounds
        self.reps = reps
        self.space = Space.of(spec.search_space())
        self.autotune = [c.label() for c in spec.configs]
        self.trials: dict[str, Trial] = {}
        self.evaluations = 0
        self.launches = 0
        self.checks = 0
        self.ref: str | None = None
        self.on_progress = on_progress
        self.started = time.perf_counter()
        self.prefetched: set[str] = set()
        self.default_races: tuple[str, ...] = ()  # the default is racy: searched against race-free entries

    def prefetch(self, configs: Sequence[Config]) -> None:
        self.prefetched.update(c.label() for c in configs)
        self.measurer.prefetch(configs)

    def prepare(self, config: Config) -> Trial:
        label = config.label()
        if label in self.trials:
            return self.trials[label]
        verdict = self.measurer.prepare(config)
        trial = Trial(config, label, verdict.status, rel_err=verdict.rel_err, compile_s=verdict.compile_s,
                      error=verdict.error, autotune=label in self.autotune, details=dict(verdict.details))
        if verdict.status not in ("compile-error", "racy"):  # neither ran a check
            self.checks += 1
        self.trials[label] = trial
        if self.ref is None and trial.status == "ok" and (trial.autotune or not self._autotune_left()):
            self.ref = label
        return trial

    def _autotune_left(self) -> bool:
        return any(a not in self.trials for a in self.autotune)

    def ok(self) -> list[Trial]:
        return [t for t in self.trials.values() if t.status == "ok"]

    def time(self, labels: Sequence[str], rounds: int, phase: str) -> dict[str, list[list[float]]]:
        """Time ``labels`` in one interleaved batch; scores are updated relative to the reference in it."""
        labels = list(dict.fromkeys(labels))
        batch: TimedBatch = self.measurer.time([self.trials[x].config for x in labels], rounds=rounds, reps=self.reps)
        self.evaluations += len(labels) * rounds
        self.launches += len(labels) * rounds * self.reps
        for label, (status, reason) in batch.failed.items():
            t = self.trials[label]
            t.status, t.error = status, reason
            if label == self.ref:
                self.ref = next((x.label for x in self.ok() if x.autotune), None) or next(
                    (x.label for x in self.ok()), None)
        ref_med = stats.median(batch.samples[self.ref]) if self.ref is not None and self.ref in batch.samples else None
        for label, samples in batch.samples.items():
            t = self.trials[label]
            t.samples_ms.extend(samples)
            t.rounds += len(samples)
            t.batches += 1
            t.median_ms = stats.median(t.samples_ms)
            if ref_med:
                t._log_ratios.append((math.log(stats.median(samples) / ref_med), len(samples)))
                total = sum(w for _, w in t._log_ratios)
                t.score = math.exp(sum(v * w for v, w in t._log_ratios) / total)
        if self.on_progress is not None:
            best = self.incumbent()
            self.on_progress({"phase": phase, "evaluations": self.evaluations, "batch": len(labels),
                              "tried": len(self.trials), "best": best.label if best else None,
                              "best_score": best.score if best else None})
        return dict(batch.samples)

    def incumbent(self) -> Trial | None:
        scored = [t for t in self.ok() if t.score is not None]
        return min(scored, key=lambda t: (t.score, t.label)) if scored else None

    def ranked(self) -> list[Trial]:
        return sorted((t for t in self.ok() if t.score is not None), key=lambda t: (t.score, t.label))

    def finish(self, method: str, samples: dict[str, list[list[float]]], budget: int, seed: int, top: int,
               notes: list[str]) -> Level1Result:
        med = {label: stats.median(s) for label, s in samples.items() if self.trials[label].status == "ok"}
        if not med:
            raise NoWorkingConfig(f"bench spec {self.spec.label()}: no configuration of its level-1 space compiled, "
                                  "ran and matched the reference")
        order = sorted(med, key=lambda x: (med[x], x))
        auto = [x for x in order if self.trials[x].autotune]
        if not auto:
            raise NoWorkingConfig(f"bench spec {self.spec.label()}: no entry of its autotune list compiled, ran and "
                                  "matched the reference (no baseline for the gain)")
        best = order[0]
        compiles = len(self.prefetched | set(self.trials))  # this run's, prefetched-but-unused ones included
        return Level1Result(
            method=method, backend=self.measurer.backend, space_size=len(self.space),
            space_kind="grid" if self.space.grid else "list", evaluations=self.evaluations, launches=self.launches,
            checks=self.checks, compiles=compiles, seconds=time.perf_counter() - self.started,
            trials=tuple(self.trials.values()), best=self.trials[best].config, best_ms=med[best],
            autotune_best=self.trials[auto[0]].config, autotune_best_ms=med[auto[0]],
            top=tuple(self.trials[x].config for x in order[:max(1, min(top, 3))]), budget=budget, rounds=self.rounds,
            reps=self.reps, seed=seed, notes=tuple(notes) + self._racy_default_note(), default_races=self.default_races)

    def _racy_default_note(self) -> tuple[str, ...]:
        if not self.default_races:
            return ()
        from kbuild.sass.hazards import WGMMA_RACE_ISSUE

        racy = sorted(t.label for t in self.trials.values() if t.status == "racy" and t.autotune)
        return (f"the default configuration has a wgmma register race ({WGMMA_RACE_ISSUE}): not shipped; the gain is "
                f"against the best race-free entry of the autotune list (racy entries left out: {', '.join(racy)})",)

    def racy_default(self, default: Trial) -> Level1Result:
        """The result when the default configuration is racy: the default, unsearched and untimed."""
        races = tuple(default.details.get("wgmma_register_hazards") or [default.error or "?"])
        return Level1Result(
            method="none", backend=self.measurer.backend, space_size=len(self.space),
            space_kind="grid" if self.space.grid else "list", evaluations=0, launches=0, checks=0,
            compiles=len(self.prefetched | set(self.trials)), seconds=time.perf_counter() - self.started,
            trials=tuple(self.trials.values()), best=default.config, best_ms=math.nan, autotune_best=default.config,
            autotune_best_ms=math.nan, top=(default.config,), budget=0, rounds=self.rounds, reps=self.reps, seed=0,
            notes=("the default configuration has a wgmma register race: level 1 searched nothing",),
            default_races=races)


def _exhaustive(run: _Run, seed: int, top: int) -> Level1Result:
    configs = list(run.space.configs)
    run.prefetch(configs)
    for c in configs:
        run.prepare(c)
    labels = [t.label for t in run.ok()]
    if run.ref is None or not labels:
        raise NoWorkingConfig(f"bench spec {run.spec.label()}: no configuration of its level-1 space compiled, "
                              "ran and matched the reference")
    samples = run.time(labels, run.rounds, "exhaustive")
    return run.finish("exhaustive", samples, len(configs) * run.rounds, seed, top, [])


class _Proposer:
    """Optuna's TPE over the space, asking for configurations not tried or pending yet."""

    def __init__(self, space: Space, seed: int, n_startup: int) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.space = space
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup, multivariate=True,
                                             constant_liar=True)
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self.rng = random.Random(seed)
        self.pending: dict[str, Any] = {}
        self.values: dict[str, float] = {}

    def _suggest(self, trial: Any) -> Config:
        params = {name: trial.suggest_categorical(name, list(values)) for name, values in self.space.dimensions.items()}
        return self.space.config(params)

    def ask(self, n: int, seen: set[str], *, first: Sequence[Config] = ()) -> list[Config]:
        """Up to ``n`` configurations (``first`` before any proposal), none in ``seen`` or pending."""
        out: list[Config] = []
        for c in first:
            if c.label() not in seen and c.label() not in self.pending and len(out) < n:
                self.study.enqueue_trial(self.space.params(c))
                trial = self.study.ask()
                self.pending[c.label()] = trial
                out.append(c)
        misses = 0
        while len(out) < n:
            taken = seen | set(self.pending)
            unseen = [c for c in self.space.configs if c.label() not in taken]
            if not unseen:
                break
            if misses >= 3:  # TPE keeps proposing known points: take an untried one at random (seeded)
                self.study.enqueue_trial(self.space.params(self.rng.choice(unseen)))
                misses = 0
            trial = self.study.ask()
            c = self._suggest(trial)
            label = c.label()
            if label in taken:
                misses += 1
                if label in self.values:
                    self.study.tell(trial, self.values[label])
                else:
                    self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
                continue
            self.pending[label] = trial
            out.append(c)
        return out

    def tell(self, label: str, value: float) -> None:
        self.values[label] = value
        trial = self.pending.pop(label, None)
        if trial is not None:
            self.study.tell(trial, value)

    def drop(self, label: str) -> None:
        trial = self.pending.pop(label, None)
        if trial is not None:
            self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)


def _rungs_cost(k: int, m: int, rounds: int) -> int:
    """Evaluations of the final rung (the best ``k`` and the reference, ``rounds`` each) and of the halving rung
    before it (the best ``m`` and the reference, ``max(2, rounds // 4)`` each; none when ``m <= k``)."""
    return (k + 1) * rounds + ((m + 1) * max(2, rounds // 4) if m > k else 0)


def screen_all_cost(n: int, *, rounds: int, top: int, eta: int = 3, screen: int = 1) -> int:
    """Evaluations racing needs to screen every one of ``n`` configurations once and still run both rungs: what a
    level-1 budget should at least be, where the kernel's budget allows it (:func:`kbuild.tune.two_level.
    level1_budget`)."""
    k = max(1, min(top, n))
    return n * screen + _rungs_cost(k, min(k * eta, n), rounds) + screen


def _plan(n: int, n_auto: int, budget: int, rounds: int, screen: int, top: int, eta: int) -> tuple[int, int, int, int]:
    """(final k, halving m, halving rounds, budget) so that screening keeps at least the autotune list's worth."""
    k = max(1, min(top, n))
    mid_rounds = max(2, rounds // 4)
    m = min(k * eta, n)

    def cost(k: int, m: int) -> int:
        return _rungs_cost(k, m, rounds)

    floor = (n_auto + 1) * screen
    while cost(k, m) + floor > budget and m > k:
        m -= 1
    while cost(k, m) + floor > budget and k > 1:
        k -= 1
        m = min(m, k)
    return k, m, mid_rounds, max(budget, cost(k, m) + floor)


def _racing(run: _Run, *, budget: int, max_trials: int, seed: int, top: int, batch: int, eta: int,
            screen_rounds: int, deadline: float | None = None) -> Level1Result:
    space = run.space
    notes: list[str] = []
    autotune_configs = [c for c in run.spec.configs]
    k, m, mid_rounds, budget_used = _plan(len(space), len(autotune_configs), budget, run.rounds, screen_rounds, top, eta)
    if budget_used > budget:
        notes.append(f"budget raised from {budget} to {budget_used} evaluations: the final rung alone needs that")
    reserved = (k + 1) * run.rounds + ((m + 1) * mid_rounds if m > k else 0)
    screen_budget = budget_used - reserved
    proposer = _Proposer(space, seed, n_startup=max(4, min(10, len(space) // 4)))
    penalty = math.log(4.0)
    seen: set[str] = set()

    def propose(n: int, first: Sequence[Config] = ()) -> list[Config]:
        n = min(n, max_trials - len(seen) - len(proposer.pending))
        configs = proposer.ask(n, seen, first=first) if n > 0 else []
        run.prefetch(configs)
        return configs

    def prepare_all(configs: Sequence[Config]) -> list[str]:
        ok = []
        for c in configs:
            seen.add(c.label())
            t = run.prepare(c)
            if t.status == "ok":
                ok.append(t.label)
            else:
                proposer.tell(t.label, max([penalty, *proposer.values.values()]) + math.log(2.0))
        return ok

    # Screening. The first batch: the autotune list, then proposals.
    spent = 0
    first_n = max(batch, len(autotune_configs))
    pending = propose(min(first_n, screen_budget // screen_rounds - 1), first=autotune_configs)
    while pending:
        ok_new = prepare_all(pending)
        inc = run.incumbent()
        anchors = [x for x in (run.ref, inc.label if inc else None) if x is not None and x not in ok_new]
        labels = [*ok_new, *anchors]
        if run.ref is None:  # nothing works yet: nothing to time against
            labels = []
        cost = len(labels) * screen_rounds
        # The next batch, proposed and compiling while this one is timed.
        left = screen_budget - spent - cost
        n_next = left // screen_rounds - 2
        if deadline is not None and time.monotonic() > deadline:
            if n_next > 0:
                notes.append(f"screening stopped after {len(seen)} configuration(s): the level-1 seconds ran out")
            n_next = 0
        pending = propose(min(batch, n_next)) if n_next > 0 else []
        if labels and cost <= screen_budget - spent:
            run.time(labels, screen_rounds, "screen")
            spent += cost
            for label in ok_new:
                t = run.trials[label]
                if t.status == "ok" and t.score is not None:
                    proposer.tell(label, math.log(t.score))
                else:
                    proposer.tell(label, max([penalty, *proposer.values.values()]) + math.log(2.0))
        elif labels:
            notes.append(f"screening stopped with {len(ok_new)} checked configuration(s) untimed (budget)")
            for label in ok_new:
                proposer.drop(label)
            break
    for label in list(proposer.pending):
        proposer.drop(label)
    if run.ref is None:
        raise NoWorkingConfig(f"bench spec {run.spec.label()}: no configuration tried compiled, ran and matched "
                              "the reference")
    # Halving: the best k × eta by score, longer, with the reference.
    ranked = run.ranked()
    if m > k and len(ranked) > k:
        run.time([*(t.label for t in ranked[:m]), run.ref], mid_rounds, "halve")
        ranked = run.ranked()
    # Final rung: the best k and the autotune list's best, as long as the exhaustive sweep times each.
    auto = [t for t in ranked if t.autotune]
    finalists = [t.label for t in ranked[:k]]
    if auto and auto[0].label not in finalists:
        finalists.append(auto[0].label)
    samples = run.time(finalists, run.rounds, "final")
    return run.finish("racing", samples, budget_used, seed, top, notes)


def search_configs(spec: BenchSpec, measurer: ConfigMeasurer | Literal["gpu", "model"], *, method: Method = "racing",
                   evaluations: int | None = None, fraction: float = 0.25, trials: int | None = None,
                   seed: int = 0, top: int = 3,
                   jobs: int | None = None, on_progress: Progress | None = None, rounds: int = 8, reps: int = 10,
                   batch: int = 8, eta: int = 3, screen_rounds: int = 1, small: bool = False,
                   seconds: float | None = None, default: Config | None = None) -> Level1Result:
    """Search ``spec``'s level-1 space (see the module docstring).

    ``measurer`` is a :class:`ConfigMeasurer`, or ``"gpu"`` / ``"model"`` to build one here (with ``jobs``
    compile processes and the spec's ``small`` size; closed at the end). ``evaluations`` caps racing's
    evaluations (default ``fraction × len(space) × rounds``), ``trials`` the configurations it proposes, the
    autotune list's included (default: as many as the evaluation budget lets screening time; TPE decides the
    order, so a tight budget screens the promising ones first). ``seconds`` bounds racing's screening: once
    spent, no new configuration is proposed and the halving and final rungs run on what was screened.
    ``default`` (what ships untuned; default: the autotune list's first entry) is compiled first: when its cubin
    has a wgmma register race, the gain is measured against the race-free autotune entries, and when there are none
    the result keeps the default without a search (:attr:`Level1Result.decision`).
    Raises :class:`NoWorkingConfig` when nothing works."""
    if method not in ("racing", "exhaustive"):
        raise UsageError(f"level-1 method must be 'racing' or 'exhaustive', not {method!r}")
    if rounds < 1 or reps < 1 or screen_rounds < 1 or batch < 1 or eta < 2 or not 0 < fraction <= 1:
        raise UsageError("level-1 search: rounds, reps, screen_rounds and batch must be ≥ 1, eta ≥ 2, "
                         "0 < fraction ≤ 1")
    owned = isinstance(measurer, str)
    if isinstance(measurer, str):
        from .measurer import GpuConfigMeasurer, ModelConfigMeasurer

        if measurer == "gpu":
            measurer = GpuConfigMeasurer(spec, small=small, jobs=jobs)
        elif measurer == "model":
            measurer = ModelConfigMeasurer(spec, small=small, jobs=jobs)
        else:
            raise UsageError(f"level-1 measurer must be 'gpu' or 'model', not {measurer!r}")
    try:
        run = _Run(spec, measurer, rounds, reps, on_progress)
        base = default or spec.configs[0]
        run.prefetch([base, *spec.configs])
        first = run.prepare(base)
        if first.status == "racy":  # the gain is measured against the race-free autotune entries, if any
            log.warning("%s: %s", spec.label(), first.error)
            if not spec.independent_reference or not any(run.prepare(c).status == "ok" for c in spec.configs):
                return run.racy_default(first)  # no reference or baseline whose outputs are defined: no search
            run.default_races = tuple(first.details.get("wgmma_register_hazards") or [first.error or "?"])
        if method == "exhaustive":
            return _exhaustive(run, seed, top)
        budget = evaluations if evaluations is not None else int(fraction * len(run.space) * rounds)
        max_trials = max(trials if trials is not None else len(run.space), len(spec.configs) + 1)
        deadline = time.monotonic() + seconds if seconds is not None else None
        return _racing(run, budget=budget, max_trials=max_trials, seed=seed, top=top, batch=batch, eta=eta,
                       screen_rounds=screen_rounds, deadline=deadline)
    finally:
        if owned:
            measurer.close()
