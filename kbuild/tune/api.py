"""``tune()``: one kernel's baseline cubin in, the best *correct* cubin (or the baseline) out.

Every algorithm gets the same budget. On a GPU backend each algorithm's ``TOP_K`` fastest distinct
schedules are then re-timed (``CONFIRM_ROUNDS`` rounds, more launches than a search evaluation)
and the winner is the best *re-measured* one: a search's best ratio is the luckiest of many noisy
timings (on the H200 a 512×512×2048 matmul's search best of 1.043× re-measured at 0.997×). The
re-timing is itself a selection among noisy numbers, so it only picks; the acceptance run that
decides is a fresh one. The winner is rebuilt from
its moves, written with the engine's own disassembly check, re-checked by the independent
verifier, then re-checked bit-exact on ``K_ACCEPT`` fresh input sets and re-timed against the
baseline in a fresh interleaved run; :func:`kbuild.tune.accept.decide` says whether it ships.
Stores are never touched here.

A kernel whose untouched cubin has a wgmma register race (:func:`baseline_races`; triton-lang/triton#9433) keeps
its baseline before anything is searched or loaded, on any backend; a winner with a race its baseline has not
(:func:`candidate_races`) is rejected before the acceptance run.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kbuild import __version__
from kbuild.extras import needs
from kbuild.fsutil import write_atomic
from kbuild.settings.model import TuneRequest
from kbuild.tune import TUNER_VERSION
from kbuild.tune.accept import Decision, aa_spread, decide, racy_baseline
from kbuild.tune.measure.backend import K_ACCEPT, MODEL_BACKEND, Backend, KernelRef, TimeResult

# The [tune] extra (gymnasium, numpy, torch, ...): without it, importing the tuner is one MissingDependencyError
# naming `pip install 'kbuild[tune]'`, which a build under tune = "auto" reports and ships the baseline.
with needs("tune", "tuning (kbuild.tune)"):
    from kbuild.tune.env import SassScheduleEnv
    from kbuild.tune.evaluate import BackendEvaluator, Budget, Evaluator, ModelEvaluator
    from kbuild.tune.search import ALGORITHMS, SearchResult, run_search


@dataclass
class TuneResult:
    kernel: str
    backend: str
    baseline: bytes = field(repr=False)
    cubin: bytes = field(repr=False)
    """What ships: the tuned cubin when ``decision.accepted``, else the baseline."""
    decision: Decision
    searches: dict[str, SearchResult]
    winner: str | None
    diff: str
    seconds: float
    pinned_fraction: float
    movable: int
    region: dict[str, Any] = field(default_factory=dict)
    """Where the search moved instructions: slots, "loop" or "block", and the pinned fraction there."""

    @property
    def accepted(self) -> bool:
        return self.decision.accepted

    @property
    def noise(self) -> float | None:
        """The widest A/A spread measured for this kernel (re-timings and acceptance run), or None."""
        spreads = [r.confirmed_aa_spread for r in self.searches.values() if r.confirmed_aa_spread is not None]
        if self.decision.aa_spread is not None:
            spreads.append(self.decision.aa_spread)
        return max(spreads) if spreads else None

    def report(self) -> dict[str, Any]:
        """The JSON report stored beside the artefact."""
        return {
            "kbuild_version": __version__,
            "tuner_version": TUNER_VERSION,
            "kernel": self.kernel,
            "backend": self.backend,
            "accepted": self.accepted,
            "decision": self.decision.as_dict(),
            "winner": self.winner,
            "algorithms": {name: r.as_dict() for name, r in self.searches.items()},
            "ppo_vs_baselines": ppo_verdict(self.searches, noise=self.noise),
            "evaluations": sum(r.evaluations for r in self.searches.values()),
            "seconds": round(self.seconds, 3),
            "pinned_fraction": round(self.pinned_fraction, 4),
            "movable_instructions": self.movable,
            "region": self.region,
            "diff": self.diff,
        }


def _score(r: SearchResult) -> float:
    """What an algorithm is judged by: its re-measured best when there is one, else its search best."""
    return r.confirmed_ratio if r.confirmed_ratio is not None else r.best_ratio


def ppo_outcome(ppo: float, best_other: float, noise: float | None = None) -> str:
    """"won", "tied" or "lost": PPO's ratio against the best other search's; a difference within ``noise``
    (an A/A spread) is a tie. Shared by the tune report and ``benchmarks/tune_table.py``."""
    if noise is not None and abs(ppo - best_other) <= noise:
        return "tied"
    return "won" if ppo < best_other else "lost"


def ppo_verdict(searches: dict[str, SearchResult], noise: float | None = None) -> str:
    """Whether PPO beat the best other search, in words (see :func:`ppo_outcome`)."""
    if "ppo" not in searches or len(searches) == 1:
        return "not compared"
    what = "re-measured" if any(r.confirmed_ratio is not None for r in searches.values()) else "search"
    ppo = _score(searches["ppo"])
    others = {k: _score(v) for k, v in searches.items() if k != "ppo"}
    best_other = min(others, key=lambda k: others[k])
    other = others[best_other]
    figures = f"{what} best {ppo:.4f} vs {best_other} {other:.4f}"
    outcome = ppo_outcome(ppo, other, noise)
    if outcome == "tied":
        return f"PPO tied with {best_other}: the difference is inside the A/A spread of {noise:.2%} ({figures})"
    if outcome == "won":
        return f"PPO beat the baselines ({figures})"
    return f"PPO did not beat {best_other} on this kernel ({figures})"


CONFIRM_ROUNDS, CONFIRM_REPS = 10, 20
"""Re-timing of each search's candidates before the winner is picked (a search evaluation uses 5 × 10)."""


def confirm(schedule: Any, searches: dict[str, SearchResult], backend: Backend) -> None:
    """Re-time each search's candidates (its ``TOP_K`` fastest distinct schedules; GPU backends) and record the
    fastest re-timing as ``confirmed_ratio`` and ``confirmed_moves``. The search's own best is the luckiest
    of many noisy timings; a runner-up is as likely to be the real improvement."""
    timed: dict[tuple[Any, ...], TimeResult] = {}
    for r in searches.values():
        candidates = r.candidates or ([(r.best_ratio, r.best_moves)] if r.best_moves else [])
        mine = [tuple(tuple(m) for m in moves) for ratio, moves in candidates if moves and not math.isnan(ratio) and ratio < 1.0]
        for moves in mine:
            if moves not in timed:
                schedule.reset()
                for record in moves:
                    schedule.apply_edit(record)
                timed[moves] = backend.time(schedule.to_cubin(verify=False, disassemble_check=False),
                                            rounds=CONFIRM_ROUNDS, reps=CONFIRM_REPS)
        valid = [m for m in mine if timed[m].valid]
        if valid:
            fastest = min(valid, key=lambda m: float(timed[m].ratio))
            t = timed[fastest]
            r.confirmed_ratio, r.confirmed_moves = float(t.ratio), list(fastest)
            r.confirmed_ci, r.confirmed_aa_spread = (float(t.ci[0]), float(t.ci[1])), aa_spread(t)
        elif mine:
            r.confirmed_ratio = math.nan
    schedule.reset()


def tune(baseline: bytes, request: TuneRequest, *, kernel: str | None = None, backend: Backend | None = None,
         kernel_ref: KernelRef | None = None, max_movable: int = 256,
         on_progress: Callable[[str, int, float], None] | None = None) -> TuneResult:
    """Search every algorithm of ``request`` on its own budget (its ``evaluations`` and ``seconds``, ``seed``,
    ``horizon``); verify and (on a GPU backend) accept the best.

    ``request.kinds`` are the SASS edit kinds the searches may use (:data:`kbuild.tune.env.KINDS`: one-slot
    ``moves``, ``far`` moves, ``yield``, ``reuse`` and ``stall`` edits); ``request.policy`` is PPO's starting point
    (a checkpoint path, ``"default"`` or None: from scratch)."""
    from kbuild.sass.schedule import Schedule
    from kbuild.sass.verify import Verifier

    algorithms, seed = request.algorithms, request.seed
    for a in algorithms:
        if a not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {a!r}; expected one of {', '.join(ALGORITHMS)}")
    if "ppo" in algorithms:
        # Import sb3 before any budget clock starts: on the H200 its first import (about 4 s) used up
        # the whole seconds budget of a short PPO run, which then measured nothing.
        import sb3_contrib  # noqa: F401
    started = time.monotonic()
    schedule = Schedule.from_cubin(baseline, kernel)
    backend_name = backend.name if backend is not None else MODEL_BACKEND
    pinned_fraction = float(sum(s.pinned is not None for s in schedule.analysis.sems)) / max(schedule.n, 1)
    races = baseline_races(schedule)
    if races:  # before the backend loads anything: no budget is spent on a kernel whose outputs depend on timing
        for algorithm in algorithms:
            if on_progress is not None:
                on_progress(algorithm, 0, 1.0)
        return TuneResult(schedule.kernel, backend_name, baseline, baseline, racy_baseline(races), {}, None,
                          "no moves", time.monotonic() - started, pinned_fraction, 0)
    if backend is not None:
        if kernel_ref is None:
            raise ValueError("a measurement backend needs the kernel's bench spec (kernel_ref)")
        backend.load(kernel_ref, baseline)
    searches: dict[str, SearchResult] = {}
    movable = 0
    region: dict[str, Any] = {}
    for i, algorithm in enumerate(algorithms):
        schedule.reset()
        budget = Budget(request.evaluations, request.seconds)
        evaluator: Evaluator = (BackendEvaluator(backend, budget, seed=seed * 1000 + i) if backend is not None
                                else ModelEvaluator(schedule, budget))
        env = SassScheduleEnv(schedule, evaluator, horizon=request.horizon, max_movable=max_movable,
                              kinds=tuple(request.kinds))
        movable = len(env.movable)
        region = describe_region(schedule, env.region)
        searches[algorithm] = run_search(algorithm, env, seed=seed, policy=request.policy)
        if on_progress is not None:
            on_progress(algorithm, budget.used, searches[algorithm].best_ratio)
    schedule.reset()
    if backend is not None:
        confirm(schedule, searches, backend)
    winner = min((a for a in searches if searches[a].best_moves and not math.isnan(_score(searches[a]))),
                 key=lambda a: _score(searches[a]), default=None)
    if winner is None or _score(searches[winner]) >= 1.0:
        confirmed = [r.confirmed_ratio for r in searches.values()
                     if r.confirmed_ratio is not None and not math.isnan(r.confirmed_ratio)]
        decision = Decision(False, f"baseline kept: no search's best beat the baseline when re-timed (best "
                                   f"{1.0 / min(confirmed):.3f}×)" if confirmed else
                                   "baseline kept: no schedule beat the baseline during the search")
        return TuneResult(schedule.kernel, backend_name, baseline, baseline, decision, searches, None,
                          "no moves", time.monotonic() - started, pinned_fraction, movable, region)
    for record in searches[winner].confirmed_moves or searches[winner].best_moves:
        schedule.apply_edit(record)
    candidate = schedule.to_cubin(verify=True, disassemble_check=True)
    problems = Verifier.from_bytes(baseline, schedule.kernel).check(candidate, disassemble_check=True)
    new_races = candidate_races(schedule, candidate) if not problems else []
    check = timing = None
    if backend is not None and not problems and not new_races:
        check = backend.check(candidate, K_ACCEPT, seed=10_000 + seed)
        if check.valid:
            timing = backend.time(candidate, rounds=15, reps=20)
    elif not problems and not new_races:
        from kbuild.tune.measure.backend import CheckResult

        check = CheckResult(valid=True, backend=MODEL_BACKEND, executed=False)
    decision = decide(verifier_problems=problems, check=check, timing=timing, new_races=new_races)
    shipped = candidate if decision.accepted else baseline
    return TuneResult(schedule.kernel, backend_name, baseline, shipped, decision, searches, winner, schedule.diff(),
                      time.monotonic() - started, pinned_fraction, movable, region)


def baseline_races(schedule: Any) -> list[Any]:
    """The wgmma register races of the untouched kernel (:mod:`kbuild.sass.hazards`, on the instructions the schedule
    already decoded); ``[]`` after one scan for a kernel without a register-operand wgmma, as a compile checks."""
    from kbuild.sass.hazards import register_races

    return register_races(schedule.analysis.instructions, schedule.analysis.spec)


def candidate_races(schedule: Any, candidate: bytes) -> list[Any]:
    """The wgmma races of ``candidate`` (the rewritten cubin, disassembled afresh) that the untouched kernel has
    not. The rewriter pins every HGMMA and WARPGROUP instruction and nothing crosses them, so this should always
    be empty: a guard that a rule missing from the ISA table cannot ship a race. A kernel without any wgmma is not
    disassembled again."""
    from kbuild.sass.disasm import disassemble
    from kbuild.sass.elf import Cubin
    from kbuild.sass.hazards import new_hazards
    from kbuild.sass.isa.sm90 import ASYNC_MMA

    an = schedule.analysis
    if not any(x.base in ASYNC_MMA for x in an.instructions):
        return []
    after = disassemble(Cubin(candidate, origin=f"the tuned cubin of {schedule.kernel}"), schedule.kernel)
    return new_hazards(an.instructions, after, an.spec)


def describe_region(schedule: Any, region: tuple[int, int]) -> dict[str, Any]:
    from kbuild.tune.env import region_kind

    start, end = region
    sems = schedule.analysis.sems[start:end]
    return {"start": start, "end": end, "kind": region_kind(schedule, region), "instructions": end - start,
            "pinned_fraction": round(sum(s.pinned is not None for s in sems) / max(len(sems), 1), 4)}


def learning_curve_png(result: TuneResult, path: str) -> bool:
    """Best ratio against evaluations, one line per algorithm. False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    for name, r in result.searches.items():
        if r.curve:
            xs, ys = zip(*r.curve)
            ax.step(xs, ys, where="post", label=name)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("evaluations")
    ax.set_ylabel("best time / baseline time")
    ax.set_title(f"{result.kernel} ({result.backend})", fontsize=9)
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    write_atomic(path, buf.getvalue())
    return True
