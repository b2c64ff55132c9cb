"""Mutation-style tests: each dependency rule has a case it must reject, next to a control case that
differs only in the dependency and is accepted. Removing the rule makes the first assertion fail."""

from __future__ import annotations

import pytest
from sass_synth import P, build, schedule, swap_reason

from kbuild.sass.deps import mem_conflict
from kbuild.sass.elf import NvInfoRecord

NOB = "[B-:R-:W-:Y:S02]"


def reason(upper: str, lower: str, **kw) -> str | None:
    return swap_reason([upper, lower, f"{NOB} EXIT"], **kw)


# --- registers --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("upper", "lower"), [
    ("FADD R4, R1, R2", "FMUL R9, R4, R3"),  # RAW
    ("FADD R4, R1, R2", "FMUL R1, R5, R3"),  # WAR
    ("FADD R4, R1, R2", "MOV R4, R7"),  # WAW
    ("IMAD.WIDE R4, R1, 0x4, R2", "FADD R9, R5, R3"),  # WIDE writes a pair
    ("HMMA.16816.F32 R8, R12, R16, R8", "FADD R11, R30, R31"),  # MMA fragment of 4 registers
    ("LDC.64 R4, c[0x0][0x210]", "FADD R5, R30, R31"),  # .64 destination
    ("CS2R R4, SRZ", "FADD R5, R30, R31"),  # CS2R writes two registers
    ("ISETP.GE.AND P0, P1, R2, R3, PT", "@P1 FADD R5, R30, R31"),  # second predicate output
    ("IADD3 R4, P2, R1, R2, RZ", "SEL R9, R8, R7, P2"),  # carry predicate
    ("ULDC.64 UR4, c[0x0][0x118]", "MOV R9, UR5"),  # uniform pair
])
def test_register_dependencies_reject(upper, lower):
    assert (reason(f"{NOB} {upper}", f"{NOB} {lower}") or "").startswith("registers")


@pytest.mark.parametrize(("upper", "lower"), [
    ("FADD R4, R1, R2", "FMUL R9, R6, R3"),
    ("IMAD.WIDE R4, R1, 0x4, R2", "FADD R9, R6, R3"),
    ("HMMA.16816.F32 R8, R12, R16, R8", "FADD R20, R30, R31"),
    ("ISETP.GE.AND P0, P1, R2, R3, PT", "@P2 FADD R5, R30, R31"),
])
def test_register_controls_accept(upper, lower):
    assert reason(f"{NOB} {upper}", f"{NOB} {lower}") is None


def test_vector_loads_and_stores_cover_their_width():
    # LDS.128 writes R4..R7; STSM .4 reads R8..R11 although the text names only R8
    lds = "[B-:R-:W0:Y:S02] LDS.128 R4, [R2]"
    assert (reason(lds, f"{NOB} FADD R20, R7, R1") or "").startswith("registers")
    assert reason(lds, f"{NOB} FADD R20, R8, R1") is None
    stsm = "[B-:R-:W-:Y:S02] STSM.16.M88.4 [R2], R8"
    assert (reason(stsm, f"{NOB} MOV R11, RZ") or "").startswith("registers")
    assert reason(stsm, f"{NOB} MOV R12, RZ") is None
    ldsm = "[B-:R-:W0:Y:S02] LDSM.16.M88.4 R12, [R2]"  # nvdisasm prints it as 'R12[R2]'
    assert (reason(ldsm, f"{NOB} MOV R15, RZ") or "").startswith("registers")


def test_missing_comma_form_is_split():
    an = build(["[B-:R-:W0:Y:S02] LDS R45, [R23]", f"{NOB} EXIT"])
    assert an.instructions[P].operands == ("R45", "[R23]")
    an2 = build(["[B-:R-:W0:Y:S02] LDS R45[R23]", f"{NOB} EXIT"])
    assert an2.instructions[P].operands == ("R45", "[R23]")
    assert an2.sems[P].writes == an.sems[P].writes and an2.sems[P].reads == an.sems[P].reads
    assert an2.sems[P].writes == 1 << 45


def test_implicit_p2r_reads_and_r2p_writes_predicates():
    assert (reason(f"{NOB} ISETP.GE.AND P3, PT, R1, R2, PT", f"{NOB} P2R R5, PR, RZ, 0x8")
            or "").startswith("registers")
    assert (reason(f"{NOB} R2P PR, R4, 0x7f", f"{NOB} @P2 MOV R1, R2") or "").startswith("registers")
    assert (reason(f"{NOB} R2P PR, R4, 0x7f", f"{NOB} FSETP.GT.AND P5, PT, R1, R2, PT") or "").startswith(
        "registers")
    assert reason(f"{NOB} FADD R9, R1, R2", f"{NOB} P2R R5, PR, RZ, 0x8") is None


# --- scoreboards --------------------------------------------------------------------------------------
def test_barrier_setter_never_crosses_its_waiter():
    setter = "[B-:R-:W0:Y:S02] LDG.E R4, [R2.64]"
    assert "barrier setter" in (reason(setter, "[B0:R-:W-:Y:S02] FADD R9, R8, R7") or "")
    assert reason(setter, "[B1:R-:W-:Y:S02] FADD R9, R8, R7") is None or "wait mask" not in (
        reason(setter, "[B1:R-:W-:Y:S02] FADD R9, R8, R7") or "")
    # read barrier too
    assert "barrier setter" in (reason("[B-:R2:W-:Y:S02] STG.E [R2.64], R5", "[B2:R-:W-:Y:S02] MOV R9, RZ") or "")


def test_wait_carrier_never_moves_down():
    assert "wait mask" in (reason("[B1:R-:W-:Y:S02] FADD R9, R8, R7", f"{NOB} MOV R20, RZ") or "")
    assert reason("[B-:R-:W-:Y:S02] FADD R9, R8, R7", f"{NOB} MOV R20, RZ") is None


def test_variable_latency_instructions_keep_their_order():
    # ptxas gave only the second MUFU a barrier; a consumer of R4 waits on it
    assert "variable-latency" in (reason("[B-:R-:W-:Y:S02] MUFU.EX2 R4, R4", "[B-:R-:W0:Y:S02] MUFU.EX2 R5, R5")
                                  or "")
    assert reason("[B-:R-:W-:Y:S02] MUFU.EX2 R4, R4", f"{NOB} FADD R9, R8, R7") is None


def test_depbar_counted_setters_keep_order():
    lines = ["[B-:R-:W0:Y:S02] LDG.E R4, [R2.64]", "[B-:R-:W0:Y:S02] FADD R9, R8, R7",
             f"{NOB} DEPBAR.LE SB0, 0x1", f"{NOB} EXIT"]
    an = build(lines)
    assert an.depbar_mask == 1
    an.sems[P].variable = an.sems[P + 1].variable = False  # isolate the DEPBAR rule
    assert "DEPBAR" in (an.pair_conflict(P, P + 1) or "")
    an.depbar_mask = 0
    assert an.pair_conflict(P, P + 1) is None


# --- memory --------------------------------------------------------------------------------------------
def test_memory_spaces():
    an = build([f"{NOB} STS [R2], R3", f"{NOB} LDS R4, [R5]", f"{NOB} STG.E [R6.64], R7",
                f"{NOB} LD.E R8, [R10.64]", f"{NOB} LDG.E R12, [R14.64]", f"{NOB} LDL R16, [R1+0x4]",
                f"{NOB} EXIT"])
    s = an.sems[P:]
    assert mem_conflict(s[0], s[1])  # shared store / shared load
    assert not mem_conflict(s[1], s[2])  # shared load / global store
    assert mem_conflict(s[3], s[0]) and mem_conflict(s[3], s[2])  # generic load / any store
    assert mem_conflict(s[2], s[4])  # global store / global load
    assert not mem_conflict(s[1], s[4])  # two loads
    assert not mem_conflict(s[5], s[0])  # local load / shared store
    # in a pair check, with the in-order rule switched off, the memory rule alone rejects
    for x in s:
        x.variable = False
    assert (an.pair_conflict(P, P + 1) or "").startswith("memory")
    assert an.pair_conflict(P + 1, P + 2) is None


# --- barriers, fences, async, unknown opcodes, control flow ----------------------------------------
@pytest.mark.parametrize("pinned", [
    "BAR.SYNC.DEFER_BLOCKING 0x0", "MEMBAR.ALL.CTA", "FENCE.VIEW.ASYNC.S", "DEPBAR.LE SB0, 0x0",
    "LDGDEPBAR", "LDGSTS.E.BYPASS.128 [R74], [R2.64]", "SYNCS.ARRIVE.TRANS64 RZ, [UR16+0x18000], R3",
    "HGMMA.64x64x16.F32 R24, gdesc[UR8], RZ, !UPT", "WARPGROUP.ARRIVE", "UTMALDG.2D [UR16], [UR28]",
    "VOTEU.ANY UP1, P5", "ATOMG.E.EXCH.STRONG.GPU PT, RZ, [R4], R7", "NOP", "FROBNICATE R1, R2",
    "LDG.E.STRONG.GPU R4, [R2.64]", "S2R R0, SR_CLOCKLO", "FADD R1, R2, weird_operand",
])
def test_pinned_instructions_are_never_crossed(pinned):
    lines = [f"{NOB} MOV R40, RZ", f"{NOB} {pinned}", f"{NOB} MOV R41, RZ", f"{NOB} EXIT"]
    an = build(lines)
    assert an.sems[P + 1].pinned, pinned
    assert (swap_reason(lines, 0) or "").startswith("pinned")
    assert (swap_reason(lines, 1) or "").startswith("pinned")


def test_moves_never_leave_a_basic_block():
    # the branch targets line 3 (offset 0x80 after the prologue): lines 2 and 3 are in different blocks
    lines = [f"{NOB} MOV R40, RZ", f"{NOB} @P0 BRA 0x80", f"{NOB} MOV R41, RZ", "[B-:R-:W-:-:S15] MOV R42, RZ",
             f"{NOB} EXIT"]
    an = build(lines)
    assert an.block_of[P + 2] != an.block_of[P + 3]
    assert (swap_reason(lines, 2) or "").startswith("block")
    control = [f"{NOB} MOV R40, RZ", f"{NOB} @P0 BRA 0x90", f"{NOB} MOV R41, RZ", "[B-:R-:W-:-:S15] MOV R42, RZ",
               f"{NOB} EXIT"]
    assert build(control).block_of[P + 2] == build(control).block_of[P + 3]


# --- fixed-latency distances --------------------------------------------------------------------------
def test_distance_needs_a_repair_beyond_15_rejected():
    lines = ["[B-:R-:W-:-:S01] FADD R4, R1, R2", "[B-:R-:W-:-:S15] IMAD R9, R10, R11, RZ",
             "[B-:R-:W-:-:S02] FMUL R5, R4, R3", f"{NOB} EXIT"]
    # FMUL moving above the IMAD would leave 1 of the 16 cycles; raising FADD's stall to 16 is impossible
    assert (swap_reason(lines, 1) or "").startswith("distance")


def test_distance_shortfall_is_repaired():
    lines = ["[B-:R-:W-:-:S02] FADD R4, R1, R2", "[B-:R-:W-:-:S03] IMAD R9, R10, R11, RZ",
             "[B-:R-:W-:-:S02] FMUL R5, R4, R3", f"{NOB} EXIT"]
    s = schedule(lines)
    assert s.why_illegal(P + 2, 0) is None
    mv = s.apply(P + 2, 0)
    assert mv.repairs and s.stall[P] == 5  # the FADD now stalls 2 + 3 cycles before the FMUL issues
    s.undo()
    assert s.stall[P] == 2


def test_distance_to_block_entry_is_kept():
    # the FMUL reads R4 from another block: it may not get closer to the block start than it was
    lines = [f"{NOB} @P0 BRA 0x10", "[B-:R-:W-:-:S06] IMAD R9, R10, R11, RZ",
             "[B-:R-:W-:-:S02] FMUL R5, R4, R3", f"{NOB} EXIT"]
    assert (swap_reason(lines, 1, prologue=False) or "").startswith("distance")
    far = [f"{NOB} @P0 BRA 0x10", *(["[B-:R-:W-:-:S15] IMAD R9, R10, R11, RZ"] * 6),
           "[B-:R-:W-:-:S02] FMUL R5, R4, R3", "[B-:R-:W-:-:S15] MOV R50, RZ", f"{NOB} EXIT"]
    assert swap_reason(far, 6, prologue=False) is None  # 75 cycles from the entry: far beyond any latency


# --- nv.info offsets and relocations -------------------------------------------------------------
def test_unknown_nvinfo_attribute_pins_what_it_may_address():
    rec = NvInfoRecord(".nv.info.synthetic", 0x04, 0x99, 0, (16 * (P + 1)).to_bytes(4, "little"))
    lines = [f"{NOB} MOV R40, RZ", f"{NOB} MOV R41, RZ", f"{NOB} MOV R42, RZ", f"{NOB} EXIT"]
    an = build(lines, nvinfo=[rec])
    assert "nv.info" in (an.sems[P + 1].pinned or "")
    assert (swap_reason(lines, 0, nvinfo=[rec]) or "").startswith("pinned")
    assert swap_reason(lines, 0) is None


def test_mbarrier_records_pin_their_instructions():
    rec = NvInfoRecord(".nv.info.synthetic", 0x04, 0x39, 0, (16 * (P + 2)).to_bytes(4, "little") + b"\xff\0\0\0")
    an = build([f"{NOB} MOV R40, RZ", f"{NOB} MOV R41, RZ", f"{NOB} MOV R42, RZ", f"{NOB} EXIT"], nvinfo=[rec])
    assert "nv.info" in (an.sems[P + 2].pinned or "")


def test_relocated_instructions_are_pinned():
    lines = [f"{NOB} MOV R40, RZ", f"{NOB} MOV R41, RZ", f"{NOB} MOV R42, RZ", f"{NOB} EXIT"]
    assert (swap_reason(lines, 0, relocs=[16 * (P + 1)]) or "").startswith("pinned")
    assert swap_reason(lines, 0) is None


def test_unsupported_arch_has_no_table():
    from kbuild.errors import UsageError
    from kbuild.sass.isa import arch_spec

    with pytest.raises(UsageError, match="no SASS table for sm_75"):
        arch_spec(75)


def test_war_distance_is_kept():
    # seen on the H200 (softmax, illegal address): ULDC.64 moved to one cycle after the ULEA.HI.X that
    # reads UR9. The writer may not get closer to the reader than ptxas placed it.
    lines = ["[B-:R-:W-:Y:S01] ULEA.HI.X.SX32 UR4, UR4, UR9, 0x2, UP0", "[B-:R-:W-:Y:S15] LOP3.LUT R2, R9, 0x80, RZ, 0xfc, !PT",
             "[B-:R-:W-:Y:S01] ULDC.64 UR8, c[0x0][0x208]", f"{NOB} EXIT"]
    assert (swap_reason(lines, 1) or "").startswith("distance")
    an = build(lines)
    assert any(int(p) == P and int(c) == P + 2 for p, c in zip(an.cons_p, an.cons_c))


def test_distance_to_a_barrier_is_kept():
    # seen on the H200 (layernorm, wrong result): an LDS moved to one cycle after BAR.SYNC.DEFER_BLOCKING
    lines = [f"{NOB} MOV R40, RZ", "[B-:R-:W-:Y:S01] BAR.SYNC.DEFER_BLOCKING 0x0",
             "[B-:R-:W-:-:S15] PLOP3.LUT P1, PT, PT, PT, UP1, 0x40, 0x0", "[B-:R-:W0:Y:S04] @!P2 LDS R10, [R13]",
             f"{NOB} EXIT"]
    assert (swap_reason(lines, 2) or "").startswith("distance")
    an = build(lines)
    bar = P + 1
    assert {int(c) for p, c in zip(an.cons_p, an.cons_c) if int(p) == bar} >= {P + 2, P + 3}
