"""kbuild.sass.hazards: wgmma's asynchronous register operands. Each rejecting case has a control case that
differs only in the wait (or the register) and is clean; the last tests run the check on real cubins: the int4
tile GEMM's variants as the H200 found them wrong (the one-step loop) and as emitted now (two steps)."""

from __future__ import annotations

import pytest
from sass_synth import instruction

from kbuild.sass.hazards import async_mma_hazards, mma_operands
from kbuild.sass.isa.sm80 import ldsm_count
from kbuild.sass.isa.sm90 import async_mma_acc_regs

MMA = "HGMMA.64x16x16.F32 R24, R100, gdesc[UR16], R24, gsb0"  # acc R24..R31, A R100..R103


def kernel(*lines: str) -> list:
    return [instruction(i, t) for i, t in enumerate([*lines, "EXIT"])]


def kinds(*lines: str) -> list[str]:
    return [h.kind for h in async_mma_hazards(kernel(*lines))]


def test_operand_widths_come_from_the_opcode():
    assert async_mma_acc_regs("HGMMA.64x128x16.F32") == 64
    assert async_mma_acc_regs("HGMMA.64x256x16.F32.BF16") == 128
    assert async_mma_acc_regs("HGMMA.64x128x16.F16") == 32
    acc, a = mma_operands(instruction(0, MMA))
    assert bin(acc).count("1") == 8 and acc >> 24 & 1 and acc >> 31 & 1 and not acc >> 32 & 1
    assert a == 0xF << 100
    assert mma_operands(instruction(0, "HGMMA.64x16x16.F32 R24, gdesc[UR4], gdesc[UR8], R24"))[1] == 0
    assert (ldsm_count(("16", "MT88")), ldsm_count(("16", "M88", "2")), ldsm_count(("16", "M88", "4"))) == (1, 2, 4)


@pytest.mark.parametrize(("touch", "kind"), [
    ("FADD R101, R1, R2", "writes an in-flight A fragment"),
    ("LDS.128 R100, [R2]", "writes an in-flight A fragment"),
    ("MOV R30, RZ", "writes an in-flight accumulator"),
    ("FADD R9, R31, R2", "reads an in-flight accumulator"),
])
def test_touching_an_operand_before_the_wait_is_a_hazard(touch, kind):
    assert kinds("WARPGROUP.ARRIVE", MMA, touch, "WARPGROUP.DEPBAR.LE gsb0, 0x0") == [kind]
    assert kinds("WARPGROUP.ARRIVE", MMA, "WARPGROUP.DEPBAR.LE gsb0, 0x0", touch) == []


def test_reading_the_a_fragment_in_flight_is_allowed_and_unrelated_registers_are_clean():
    assert kinds("WARPGROUP.ARRIVE", MMA, "FADD R9, R100, R2", "FADD R104, R1, R2", "LDS.128 R12, [R22]",
                 "WARPGROUP.DEPBAR.LE gsb0, 0x0") == []


def test_wait_one_keeps_the_newest_group_in_flight():
    second = "HGMMA.64x16x16.F32 R24, R104, gdesc[UR16], R24, gsb0"
    # after wait 1 only the second group (A = R104..R107) is in flight: R100 is free, R105 is not
    assert kinds(MMA, second, "WARPGROUP.DEPBAR.LE gsb0, 0x1", "MOV R100, RZ") == []
    assert kinds(MMA, second, "WARPGROUP.DEPBAR.LE gsb0, 0x1", "MOV R105, RZ") == ["writes an in-flight A fragment"]


def test_a_loop_that_rewrites_the_fragment_of_the_previous_iteration_is_a_hazard():
    # the one-step loop of the int4 GEMM: dequantise into R100, wgmma, wait 1 (the previous one), branch back
    loop = ["MOV R100, RZ", "WARPGROUP.ARRIVE", MMA, "WARPGROUP.DEPBAR.LE gsb0, 0x1", "@P0 BRA 0x0"]
    hz = async_mma_hazards(kernel(*loop, "WARPGROUP.DEPBAR.LE gsb0, 0x0"))
    assert [(h.index, h.kind) for h in hz] == [(0, "writes an in-flight A fragment")]
    # two steps per iteration, alternating fragments: each write finds its own previous wgmma retired
    other = "HGMMA.64x16x16.F32 R24, R104, gdesc[UR16], R24, gsb0"
    pair = ["MOV R100, RZ", MMA, "WARPGROUP.DEPBAR.LE gsb0, 0x1", "MOV R104, RZ", other,
            "WARPGROUP.DEPBAR.LE gsb0, 0x1", "@P0 BRA 0x0"]
    assert async_mma_hazards(kernel(*pair, "WARPGROUP.DEPBAR.LE gsb0, 0x0")) == []


def test_an_unwaited_group_reaches_the_epilogue():
    assert kinds("@P0 BRA 0x30", MMA, "WARPGROUP.DEPBAR.LE gsb0, 0x0", "FADD R9, R24, R2") == []
    assert kinds(MMA, "@P0 BRA 0x30", "WARPGROUP.DEPBAR.LE gsb0, 0x0", "FADD R9, R24, R2") == \
        ["reads an in-flight accumulator"]


@pytest.mark.slow
def test_the_int4_tile_gemm_has_no_wgmma_register_race():
    """The int4 GEMM's sm_90 variants (decode and prefill problems): every one compiled as kbuild compiles it,
    disassembled, and free of the race that made 12 of 45 variants wrong on the H200 on 2026-12-04."""
    from kbuild.bench.spec import compile_spec
    from kbuild.sass.disasm import disassemble
    from kbuild.sass.elf import Cubin
    from kbuild.tile import kernels

    for m, n, k in ((4096, 4096, 4096),):  # its default variant (BLOCK_T=256) was wrong on every run
        spec = kernels.int4_gemm(m=m, n=n, k=k)
        for cfg in spec.configs:
            compiled = compile_spec(spec, cfg, 90)
            cubin = Cubin(compiled.asm["cubin"], origin=f"{spec.name} [{cfg.label()}]")
            assert async_mma_hazards(disassemble(cubin, compiled.metadata.name)) == [], cfg.label()


def test_a_kernel_without_a_register_wgmma_is_not_disassembled():
    from kbuild.sass.hazards import register_wgmma_hazards

    ss = "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%r1,%r2}, %rd1, %rd2, p, 1, 1, 0, 0;"
    assert register_wgmma_hazards(b"not a cubin", "k", ptx=ss) == []  # a shared-memory A operand: nothing to read


@pytest.mark.slow
def test_triton_36_pipelines_a_register_wgmma_with_the_race():
    """The suite's rmsnorm_swiglu (its normalised A operand in registers): Triton 3.6 issues the next iteration's
    ldmatrix into the fragment of a wgmma still in flight (``wait_group 7``), triton-lang/triton#9433. When a Triton
    release fixes it, this test fails and says so."""
    from kbuild.bench.kernels import SUITE
    from kbuild.bench.spec import compile_spec, load_spec
    from kbuild.sass.hazards import register_wgmma_hazards

    spec = load_spec(SUITE["rmsnorm_swiglu"])
    compiled = compile_spec(spec, spec.configs[0], 90)
    found = register_wgmma_hazards(compiled.asm["cubin"], compiled.metadata.name, compiled.asm["ptx"])
    assert found and all(h.kind == "writes an in-flight A fragment" for h in found)
