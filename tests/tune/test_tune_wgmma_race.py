"""The tuner and wgmma register races (kbuild.sass.hazards; Triton 3.6's pipelining of a wgmma with a register A
operand, triton-lang/triton#9433): a kernel whose untouched cubin has a race keeps its baseline without a search,
on the cost model and on a GPU-like backend alike; a clean kernel is tuned as before; and a schedule with a race its
baseline has not is rejected even when the rewriter and the verifier both missed it. Real cubins: the suite's
rmsnorm_swiglu compiled here for sm_90 (racy), the committed attention_fwd fixture (a clean register-operand wgmma)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from kbuild.cli import main
from kbuild.sass.disasm import Instruction, disassemble
from kbuild.sass.elf import Cubin, patch
from kbuild.sass.hazards import WGMMA_RACE_ISSUE, async_mma_hazards, has_register_wgmma, new_hazards
from kbuild.settings.model import Settings, TuneRequest
from kbuild.tune.accept import decide
from kbuild.tune.api import tune
from kbuild.tune.measure.backend import GPU_BACKEND, K_ACCEPT, CheckResult, KernelRef, TimeResult


def request(**changes: Any) -> TuneRequest:
    """The settings model's default tuning request with the SASS edit kind the tuners searched when they took keywords
    (``moves`` alone), ``changes`` over it."""
    return Settings().tune_request(**{"kinds": ("moves",), **changes})


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sass"
ATTENTION = (FIXTURES / "attention_fwd.sm90.cubin").read_bytes()  # HGMMA with A in registers (P @ V), clean
SOFTMAX = (FIXTURES / "softmax.sm90.cubin").read_bytes()  # no wgmma


@functools.cache
def racy() -> tuple[bytes, str]:
    """The suite's rmsnorm_swiglu for sm_90 (its first configuration), with Triton 3.6's race."""
    from kbuild.bench.kernels import SUITE
    from kbuild.bench.spec import compile_spec, load_spec

    spec = load_spec(SUITE["rmsnorm_swiglu"])
    compiled = compile_spec(spec, spec.configs[0], 90)
    return compiled.asm["cubin"], compiled.metadata.name


def instructions(data: bytes) -> list:
    cubin = Cubin(data)
    return disassemble(cubin, cubin.default_kernel(None))


def timing(ratio: float) -> TimeResult:
    return TimeResult(backend=GPU_BACKEND, ratio=ratio, ci=(ratio - 0.002, ratio + 0.002), aa_ratio=1.0,
                      aa_ci=(0.999, 1.001), baseline_ms=1.0, candidate_ms=ratio)


class FastBackend:
    """A GPU-like backend that finds every candidate bit-exact and 3% faster, and records every call."""

    name = GPU_BACKEND

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def load(self, kernel, baseline):
        self.calls.append(("load", 0))

    def check(self, candidate, k=3, *, seed=None):
        self.calls.append(("check", k))
        return CheckResult(valid=True, backend=self.name, k=k)

    def time(self, candidate, *, rounds=8, reps=10):
        self.calls.append(("time", rounds))
        return timing(0.97)

    def close(self):
        pass


def racy_candidate(data: bytes) -> bytes:
    """attention_fwd with its last wgmma wait moved two slots down, past the loop's back branch, and the first
    epilogue read of the accumulator (``FMUL R2, R57, 0.25``) in its place: words permuted in place, as the
    rewriter writes a schedule, and a race the untouched kernel has not."""
    cubin = Cubin(data)
    kernel = cubin.default_kernel(None)
    ins = disassemble(cubin, kernel)
    wait = max(i for i, x in enumerate(ins) if x.text == "WARPGROUP.DEPBAR.LE gsb0, 0x0")
    assert ins[wait + 1].text == "@!P0 BRA 0x22d0" and ins[wait + 2].text == "FMUL R2, R57, 0.25"
    text = cubin.text(kernel)

    def word(i: int) -> bytes:
        return data[text.offset + 16 * i:text.offset + 16 * i + 16]

    return patch(data, [(text.offset + 16 * wait, word(wait + 2)), (text.offset + 16 * (wait + 2), word(wait))])


def test_the_fixtures_are_what_the_tests_take_them_for():
    rs, _ = racy()
    assert has_register_wgmma(instructions(rs)) and async_mma_hazards(instructions(rs))
    assert has_register_wgmma(instructions(ATTENTION)) and async_mma_hazards(instructions(ATTENTION)) == []
    assert not has_register_wgmma(instructions(SOFTMAX))
    assert not has_register_wgmma(instructions((FIXTURES / "matmul_async.sm90.cubin").read_bytes()))  # A in smem


def test_a_racy_baseline_is_kept_on_the_cost_model_without_a_search():
    rs, symbol = racy()
    heard = []
    r = tune(rs, request(algorithms=("greedy", "random"), evaluations=50),
             kernel=symbol, on_progress=lambda algo, used, best: heard.append((algo, used)))
    assert not r.accepted and r.cubin == rs and r.winner is None
    reason = r.decision.reason
    assert reason.startswith("baseline kept: the untouched cubin has a wgmma register race")
    assert WGMMA_RACE_ISSUE in reason and "writes an in-flight A fragment" in reason
    assert "cannot be verified" in reason
    rep = r.report()
    assert rep["evaluations"] == 0 and rep["algorithms"] == {} and heard == [("greedy", 0), ("random", 0)]
    assert rep["decision"]["wgmma_register_hazards"][0] in reason and json.dumps(rep)


def test_a_racy_baseline_is_kept_on_a_gpu_backend_before_it_loads():
    rs, symbol = racy()
    backend = FastBackend()  # would accept any schedule
    r = tune(rs, request(algorithms=("random",), evaluations=20),
             kernel=symbol, backend=backend, kernel_ref=KernelRef(spec="x:y"))
    assert not r.accepted and r.cubin == rs and WGMMA_RACE_ISSUE in r.decision.reason
    assert backend.calls == []  # not loaded, checked or timed: no budget spent
    assert r.backend == GPU_BACKEND


def test_kbuild_tune_reports_the_race_as_its_decision(capsys):
    code = main(["tune", "--suite", "--only", "rmsnorm_swiglu", "--levels", "sass", "--backend", "model",
                 "--algo", "greedy", "--budget-evals", "20", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    (doc,) = json.loads(out)
    assert doc["name"] == "rmsnorm_swiglu" and not doc["accepted"] and doc["evaluations"] == 0
    assert WGMMA_RACE_ISSUE in doc["decision"]["reason"] and doc["decision"]["wgmma_register_hazards"]


def test_a_clean_register_wgmma_kernel_is_searched_as_before():
    r = tune(ATTENTION, request(algorithms=("greedy",), evaluations=30))
    assert r.searches["greedy"].evaluations > 0
    assert "wgmma" not in r.decision.reason and "wgmma_register_hazards" not in r.decision.as_dict()
    backend = FastBackend()
    r = tune(ATTENTION, request(algorithms=("random",), evaluations=4),
             backend=backend, kernel_ref=KernelRef(spec="x:y"))
    assert r.accepted and r.cubin != ATTENTION  # every candidate "3% faster": the schedule ships
    assert ("check", K_ACCEPT) in backend.calls


def test_a_kernel_without_a_register_wgmma_walks_no_control_flow(monkeypatch):
    def walk(*args, **kwargs):
        raise AssertionError("the hazard walk ran on a kernel without a register-operand wgmma")

    monkeypatch.setattr("kbuild.sass.hazards.async_mma_hazards", walk)
    r = tune(SOFTMAX, request(algorithms=("greedy",), evaluations=20))
    assert r.searches["greedy"].evaluations > 0


def test_a_schedule_with_a_new_race_is_found_on_its_bytes():
    before = instructions(ATTENTION)
    bad = racy_candidate(ATTENTION)
    found = new_hazards(before, instructions(bad))
    assert any(h.instruction == "FMUL R2, R57, 0.25" and h.kind == "reads an in-flight accumulator" for h in found)
    assert new_hazards(before, before) == []
    rs = instructions(racy()[0])
    assert async_mma_hazards(rs) and new_hazards(rs, rs) == []  # the baseline's own races are not new


def test_decide_rejects_a_new_race_whatever_the_gpu_says():
    race = new_hazards(instructions(ATTENTION), instructions(racy_candidate(ATTENTION)))
    good = CheckResult(valid=True, backend=GPU_BACKEND, k=K_ACCEPT)
    assert decide(verifier_problems=[], check=good, timing=timing(0.5)).accepted
    d = decide(verifier_problems=[], check=good, timing=timing(0.5), new_races=race)
    assert not d.accepted and WGMMA_RACE_ISSUE in d.reason and "untouched cubin has not" in d.reason
    assert d.as_dict()["wgmma_register_hazards"] == [str(h) for h in race[:20]]


def test_tune_rejects_a_racy_schedule_the_rewriter_and_verifier_missed(monkeypatch):
    """The guard behind the rules: were the rewriter to write a race (it pins HGMMA and WARPGROUP, so it cannot
    today) and the verifier to pass it, tune() still keeps the baseline, before the acceptance run."""
    from kbuild.sass.schedule import Schedule
    from kbuild.sass.verify import Verifier

    bad = racy_candidate(ATTENTION)
    to_cubin = Schedule.to_cubin

    def broken_rewriter(self, *, verify=True, disassemble_check=True):
        return bad if verify else to_cubin(self, verify=False, disassemble_check=False)

    monkeypatch.setattr(Schedule, "to_cubin", broken_rewriter)
    monkeypatch.setattr(Verifier, "check", lambda self, data, **kwargs: [])
    backend = FastBackend()
    r = tune(ATTENTION, request(algorithms=("random",), evaluations=4),
             backend=backend, kernel_ref=KernelRef(spec="x:y"))
    assert r.winner == "random" and not r.accepted and r.cubin == ATTENTION
    assert "the schedule has a wgmma register race" in r.decision.reason and WGMMA_RACE_ISSUE in r.decision.reason
    assert ("check", K_ACCEPT) not in backend.calls and ("time", 15) not in backend.calls


@pytest.mark.parametrize("operands", [("R24", "gdesc[UR8]", "RZ", "!UPT"), ("R24", "gdesc[UR4]", "gdesc[UR8]", "R24")])
def test_a_wgmma_with_a_descriptor_a_operand_is_not_a_register_wgmma(operands):
    assert not has_register_wgmma([Instruction(0, "HGMMA.64x64x16.F32", operands)])
    assert has_register_wgmma([Instruction(0, "HGMMA.64x64x16.F32", ("R56", "R24", "gdesc[UR8].tnspB", "R56"))])
