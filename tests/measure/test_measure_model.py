"""The CPU cost model: a static issue model over a minimal instruction view."""

from __future__ import annotations

import pytest

from kbuild.tune.measure.backend import MODEL_BACKEND, Backend, KernelRef
from kbuild.tune.measure.cubin import control, text_sections, with_control
from kbuild.tune.measure.model import (
    CostModel,
    Instr,
    Instruction,
    decoder_from_control_bits,
    estimate_cycles,
)


def load_then_use(load_at: int, n_alu: int = 12) -> list[Instr]:
    """An LDG (write scoreboard 0) at position ``load_at`` among ALU ops; its consumer waits at the end."""
    prog = [Instr("IADD3", stall=2) for _ in range(n_alu)]
    prog.insert(load_at, Instr("LDG.E", stall=1, latency_class="global", write_barrier=0))
    prog.append(Instr("FADD", stall=4, wait_mask=0b1))
    prog.append(Instr("EXIT", stall=1, latency_class="control"))
    return prog


def test_instr_satisfies_the_protocol() -> None:
    assert isinstance(Instr("NOP"), Instruction)


def test_stalls_add_up_for_one_warp() -> None:
    prog = [Instr("IADD3", stall=s) for s in (1, 2, 3, 4)]
    assert estimate_cycles(prog, warps=1) == 10


def test_scoreboard_wait_costs_the_latency() -> None:
    prog = [Instr("LDG.E", stall=1, latency_class="global", write_barrier=0), Instr("FADD", stall=1, wait_mask=1)]
    assert estimate_cycles(prog, warps=1, latencies={"global": 100, "fixed": 0}) == 101  # issue at 0, wait to 100, +1


def test_hoisting_a_load_is_predicted_faster() -> None:
    early, late = estimate_cycles(load_then_use(0), warps=4), estimate_cycles(load_then_use(12), warps=4)
    assert early < late


def test_more_warps_hide_latency() -> None:
    prog = load_then_use(12)
    assert estimate_cycles(prog, warps=8) < 8 * estimate_cycles(prog, warps=1)


def test_empty_program() -> None:
    assert estimate_cycles([], warps=4) == 0


class Synthetic:
    """Decode ``bytes`` that are indexes into a table of programs (a stand-in for the sass decoder)."""

    def __init__(self) -> None:
        self.programs = {b"base": load_then_use(12), b"hoisted": load_then_use(0),
                         b"changed": [*load_then_use(12), Instr("NOP")]}

    def __call__(self, blob: bytes) -> list[Instr]:
        return self.programs[blob]


def test_cost_model_backend_labels_everything() -> None:
    model = CostModel(Synthetic(), warps=4)
    assert isinstance(model, Backend)
    info = model.load(KernelRef("x:y"), b"base")
    assert info.backend == MODEL_BACKEND == "cost-model (CPU estimate, not a measurement)"
    res = model.time(b"hoisted")
    assert res.backend == MODEL_BACKEND and res.ratio < 1.0 and res.aa_ratio == 1.0
    assert model.time(b"base").ratio == 1.0
    ok = model.check(b"hoisted")
    assert ok.valid and not ok.executed and ok.backend == MODEL_BACKEND
    bad = model.check(b"changed")
    assert not bad.valid and "count changed" in (bad.reason or "")
    assert not model.check(b"unknown").valid
    assert not model.time(b"unknown").valid


def test_control_bit_decoder_on_a_real_cubin(cubins: dict[int, bytes]) -> None:
    decode = decoder_from_control_bits(lambda i, w: ("?", "global" if control(w).wbar < 6 else "fixed"))
    instrs = decode(cubins[90])
    sec = text_sections(cubins[90])[0]
    assert len(instrs) == sec.size // 16 > 10
    assert any(i.wait_mask for i in instrs) and any(i.stall > 1 for i in instrs)
    assert estimate_cycles(instrs, warps=4) > 0


def test_with_control_roundtrip() -> None:
    word = bytes(range(16))
    c = control(word)
    new = with_control(word, wait_mask=0b101010, reuse=0)
    assert control(new).wait == 0b101010 and control(new).reuse == 0
    assert control(new).stall == c.stall and control(new).wbar == c.wbar
    assert new[:13] == word[:13]  # bits below 104 untouched


@pytest.mark.parametrize("warps", [1, 2, 4, 8])
def test_estimate_is_monotone_in_stalls(warps: int) -> None:
    fast = [Instr("IADD3", stall=1) for _ in range(20)]
    slow = [Instr("IADD3", stall=3) for _ in range(20)]
    assert estimate_cycles(fast, warps=warps) <= estimate_cycles(slow, warps=warps)


def test_latency_classes_come_from_the_isa_table() -> None:
    from kbuild.sass.isa import arch_spec
    from kbuild.tune.measure.model import DEFAULT_LATENCIES, latency_class

    sm80, sm90 = arch_spec(80), arch_spec(90)
    assert latency_class("LDG.E.128.CONSTANT", sm90) == "global"
    assert latency_class("LDS.U.128", sm80) == "shared"
    assert latency_class("HGMMA.64x128x16.F32", sm90) == "tensor"
    assert latency_class("HGMMA.64x128x16.F32", sm80) == "fixed"  # not an sm_80 opcode
    assert latency_class("FFMA", sm90) == "fixed"
    assert DEFAULT_LATENCIES == dict(sm90.latencies)


def test_cost_model_on_real_sass(cubins: dict[int, bytes]) -> None:
    """With the sass engine's decoder: a real kernel; the model ranks a broken schedule, it does not judge it."""
    pytest.importorskip("kbuild.sass")
    from kbuild.tune.measure.cubin import without_reuse, without_waits
    from kbuild.tune.measure.model import sass_decoder

    model = CostModel(sass_decoder(), warps=4)
    info = model.load(KernelRef("kbuild.bench.kernels.softmax:softmax"), cubins[90])
    assert info.details["instructions"] > 10 and info.details["cycles"] > 0
    same, _ = without_reuse(cubins[90])
    assert model.time(same).ratio == 1.0  # reuse flags are not in the model
    no_waits, _ = without_waits(cubins[90])
    res = model.time(no_waits)
    assert res.ratio < 1.0 and res.backend == MODEL_BACKEND
    assert model.check(no_waits).executed is False
