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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

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


def decide(*, verifier_problems: list[str], check: CheckResult | None, timing: TimeResult | None) -> Decision:
    """Apply the rule to the three pieces of evidence."""
    if verifier_problems:
        return Decision(False, "baseline kept: the SASS verifier rejected the schedule: " + "; ".join(verifier_problems[:3]))
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
