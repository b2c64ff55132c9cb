"""Whether a tuned schedule may ship: the acceptance rule, in one place.

A candidate is accepted only when all of these hold:

1. the independent SASS verifier, re-deriving every dependency from the original cubin, finds
   nothing wrong with the rewritten one;
2. it is bit-identical to the untouched baseline on at least ``K_ACCEPT`` (10) fresh input sets;
3. a fresh interleaved timing against the baseline gives a confidence interval whose *upper*
   bound of candidate/baseline time is below ``1 − A/A spread``, i.e. the lower bound of the
   speedup beats 1.0 by more than what "no change" looks like in the same call.

Anything else is "baseline kept", with the reason. A result from the CPU cost model is never
accepted for shipping: it is labelled an estimate.

Two rules come before the search and the evidence, on any backend: a kernel whose untouched cubin has a
wgmma register race (:mod:`kbuild.sass.hazards`; Triton 3.6's pipelining of a wgmma with a register
operand, triton-lang/triton#9433) keeps its baseline without a search (:func:`racy_baseline`): its own
outputs depend on timing, so a bit-exact check against it proves nothing, and a reorder can make the race
land more often. And a schedule with a race its baseline does not have is never accepted
(``new_races`` of :func:`decide`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kbuild.sass.hazards import WGMMA_RACE_ISSUE, recorded, summary
from kbuild.tune.measure.backend import K_ACCEPT, MODEL_BACKEND, CheckResult, TimeResult


@dataclass(frozen=True)
class Decision:
    accepted: bool
    reason: str
    speedup: float | None = None
    """Baseline time / candidate time from the acceptance timing (None when not timed)."""
    speedup_ci: tuple[float, float] | None = None
    aa_spread: float | None = None
    checks: int = 0
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "reason": self.reason, "speedup": self.speedup,
                "speedup_ci": self.speedup_ci, "aa_spread": self.aa_spread, "checks": self.checks, **self.details}


def aa_spread(t: TimeResult) -> float:
    """How far from 1.0 the A/A control's interval reaches (its half-width around 1)."""
    lo, hi = t.aa_ci
    return max(abs(1.0 - lo), abs(hi - 1.0), abs(1.0 - t.aa_ratio))


def racy_baseline(hazards: Sequence[Any], *, what: str = "a schedule of it") -> Decision:
    """The decision for a kernel whose untouched cubin has wgmma register races (``hazards``, each a
    :class:`kbuild.sass.hazards.Hazard`): the baseline, without a search; ``what`` names what was not searched."""
    return Decision(False, f"baseline kept: the untouched cubin has a wgmma register race ({WGMMA_RACE_ISSUE}) at "
                           f"{summary(hazards)}; its outputs depend on timing, so {what} cannot be verified "
                           "(none was searched)",
                    details={"wgmma_register_hazards": recorded(hazards)})


def decide(*, verifier_problems: list[str], check: CheckResult | None, timing: TimeResult | None,
           new_races: Sequence[Any] = ()) -> Decision:
    """Apply the rule to the three pieces of evidence; ``new_races``: the wgmma register races of the schedule that
    the baseline has not (:func:`kbuild.sass.hazards.new_hazards`), which reject it whatever the rest says."""
    if verifier_problems:
        return Decision(False, "baseline kept: the SASS verifier rejected the schedule: " + "; ".join(verifier_problems[:3]))
    if new_races:
        return Decision(False, f"baseline kept: the schedule has a wgmma register race ({WGMMA_RACE_ISSUE}) that the "
                               f"untouched cubin has not, at {summary(new_races)}",
                        details={"wgmma_register_hazards": recorded(new_races)})
    if check is None or not check.valid:
        why = check.reason if check is not None else "not checked"
        return Decision(False, f"baseline kept: candidate failed the bit-exact check ({why})",
                        checks=check.k if check else 0)
    if check.backend == MODEL_BACKEND or not check.executed:
        return Decision(False, "baseline kept: only the CPU cost model judged this schedule (an estimate, not a "
                               "measurement); tuning results ship only after a GPU run", checks=0)
    if check.k < K_ACCEPT:
        return Decision(False, f"baseline kept: only {check.k} input sets checked (need {K_ACCEPT})", checks=check.k)
    if timing is None or not timing.valid or math.isnan(timing.ratio):
        return Decision(False, f"baseline kept: acceptance timing failed ({timing.reason if timing else 'not timed'})",
                        checks=check.k)
    spread = aa_spread(timing)
    speedup = 1.0 / timing.ratio
    ci = (1.0 / timing.ci[1], 1.0 / timing.ci[0])
    details = {"ratio": timing.ratio, "ratio_ci": timing.ci, "aa_ratio": timing.aa_ratio, "aa_ci": timing.aa_ci,
               "baseline_ms": timing.baseline_ms, "candidate_ms": timing.candidate_ms,
               "samples_ms": timing.samples}
    if timing.ci[1] < 1.0 - spread:
        return Decision(True, f"accepted: {speedup:.3f}× (95% CI {ci[0]:.3f}–{ci[1]:.3f}×), A/A spread {spread:.2%}",
                        speedup, ci, spread, check.k, details)
    return Decision(False, f"baseline kept: {speedup:.3f}× (95% CI {ci[0]:.3f}–{ci[1]:.3f}×) does not beat the A/A "
                           f"spread of {spread:.2%}", speedup, ci, spread, check.k, details)
