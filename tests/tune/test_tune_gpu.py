"""``tune()`` on a real GPU through the isolated worker (marked ``gpu``; skipped without an sm_90 GPU).

Small softmax, a few evaluations per algorithm: every search stops at its budget, and what ships is
either the untouched baseline ("baseline kept") or a schedule that passed the verifier, ``K_ACCEPT``
bit-exact input sets and the interleaved timing against the A/A spread.
"""

from __future__ import annotations

from typing import Any

from gpu_marks import needs_sm90

from kbuild.bench.spec import compile_spec, load_spec
from kbuild.settings.model import Settings, TuneRequest
from kbuild.tune.api import tune
from kbuild.tune.measure.backend import K_ACCEPT, KernelRef


def request(**changes: Any) -> TuneRequest:
    """The settings model's default tuning request with the SASS edit kind the tuners searched when they took keywords
    (``moves`` alone), ``changes`` over it."""
    return Settings().tune_request(**{"kinds": ("moves",), **changes})


pytestmark = needs_sm90

SPEC = "kbuild.bench.kernels.softmax:softmax"


def test_tune_on_the_gpu_stops_at_its_budget_and_ships_only_verified_code() -> None:
    from kbuild.tune.measure.client import WorkerClient

    spec = load_spec(SPEC, small=True)
    compiled = compile_spec(spec, spec.configs[0], 90)
    baseline = compiled.asm["cubin"]
    with WorkerClient(timeout_s=60) as worker:
        r = tune(baseline, request(algorithms=("random", "greedy", "ppo"), evaluations=6, seconds=60, seed=0),
                 kernel=compiled.metadata.name, backend=worker, kernel_ref=KernelRef(SPEC, small=True))
    assert r.backend == "gpu-worker"
    assert set(r.searches) == {"random", "greedy", "ppo"}
    for name, s in r.searches.items():
        assert 1 <= s.evaluations <= 6, name
    if r.accepted:
        assert r.cubin != baseline and r.decision.checks >= K_ACCEPT
        assert r.decision.speedup_ci is not None and r.decision.speedup_ci[0] > 1.0
    else:
        assert r.cubin == baseline and r.decision.reason.startswith("baseline kept")
