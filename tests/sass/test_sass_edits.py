"""Issue 15: far moves and control-code edits (yield, reuse, stall). Each rule has a case it must refuse, with
its reason, next to a control case that differs only in what the rule looks at and is accepted; the verifier
tests hand-make unsafe cubins (a lowered stall below a fixed latency, a reuse flag with no proof, a yield bit
cleared where it must stay) and check that they are rejected."""

from __future__ import annotations

import numpy as np
import pytest
from sass_synth import CUBINS, P, schedule

from kbuild.errors import UsageError
from kbuild.sass import DOWN, UP, IllegalMove, Schedule, control
from kbuild.sass.schedule import Edit, FarMove

NOB = "[B-:R-:W-:Y:S02]"
EXIT = f"{NOB} EXIT"


# --- far moves ---------------------------------------------------------------------------------------
FAR = [
    "[B-:R-:W-:Y:S04] FADD R2, R1, R1",       # P+0: writes R2, which the load reads
    "[B-:R-:W-:-:S00] MOV R30, RZ",           # P+1 (stall 0: the load keeps its 4 cycles from the FADD)
    "[B-:R-:W-:-:S00] MOV R31, RZ",           # P+2
    "[B-:R-:W-:-:S00] MOV R32, RZ",           # P+3
    "[B-:R-:W0:Y:S02] LDG.E R4, [R2.64]",     # P+4: can rise 3 slots, not above the FADD
    "[B0:R-:W-:Y:S02] FADD R9, R4, R4",
    EXIT,
]


def test_reach_stops_at_the_dependence_and_far_move_is_one_entry():
    s = schedule(FAR)
    load = P + 4
    assert s.reach(load, UP) == 3  # "hoist the load as far as it can go": up to just below the FADD writing R2
    assert s.reach(load, UP, limit=2) == 2
    assert s.reach(load, UP, bounds=(P + 2, s.n)) == 2
    assert s.moves == [] and np.array_equal(s.order, np.arange(s.n))  # reach leaves the schedule as it was
    far = s.apply_far(load, UP, 3)
    assert isinstance(far, FarMove) and len(s.moves) == 1 and s.pos[load] == P + 1
    assert s.records == [("far", load, UP, 3)]
    s.undo()  # one undo undoes all three steps
    assert s.moves == [] and np.array_equal(s.order, np.arange(s.n))


def test_far_move_past_its_reach_is_refused_and_changes_nothing():
    s = schedule(FAR)
    with pytest.raises(IllegalMove, match=r"step 4.*registers"):
        s.apply_far(P + 4, UP, 4)
    assert s.moves == [] and np.array_equal(s.order, np.arange(s.n))
    assert (s.why_edit_illegal(("far", P + 4, UP, 4)) or "").startswith("far: only 3")
    assert s.why_edit_illegal(("far", P + 4, UP, 3)) is None


def test_far_move_applies_the_stall_repairs_of_each_step():
    # the FMUL reads R4 from the FADD; rising two slots removes 3 + 3 cycles that must be put back
    lines = ["[B-:R-:W-:-:S02] FADD R4, R1, R2", "[B-:R-:W-:-:S03] IMAD R9, R10, R11, RZ",
             "[B-:R-:W-:-:S03] IMAD R12, R10, R11, RZ", "[B-:R-:W-:-:S02] FMUL R5, R4, R3", EXIT]
    s = schedule(lines)
    assert s.reach(P + 3, UP) == 2
    s.apply_far(P + 3, UP, 2)
    assert s.stall[P] == 8 and s.pos[P + 3] == P + 1
    s.undo()
    assert s.stall[P] == 2


def test_records_replay_on_a_reset_schedule():
    s = schedule(FAR)
    s.apply_far(P + 4, UP, 2)
    s.apply_edit(("yield", P + 1, 1))
    s.apply_edit(("stall", P + 2, 13))
    s.apply(int(s.pos[P + 5]), UP)
    recs = s.records
    want = (s.order.copy(), s.stall.copy(), s.yield_.copy(), s.reuse().copy())
    s.reset()
    for r in recs:
        s.apply_edit(list(r))  # JSON gives lists back
    assert all(np.array_equal(a, b) for a, b in zip(want, (s.order, s.stall, s.yield_, s.reuse())))
    while s.moves:
        s.undo()
    assert np.array_equal(s.order, np.arange(s.n)) and np.array_equal(s.stall, s._orig_stall)
    assert np.array_equal(s.yield_, s._yield0)


@pytest.mark.hostile(fault="malformed move record", outcome="clean error")
@pytest.mark.parametrize("record", [("jump", 1, 2), (1, 2), ("far", 1, 0), ("yield", 1.5, 1), "up", (True, 0)])
def test_malformed_records_are_usage_errors(record):
    s = schedule(FAR)
    with pytest.raises(UsageError, match="move record"):
        s.apply_edit(record)
    assert s.moves == []


# --- yield ---------------------------------------------------------------------------------------------
def test_yield_set_and_clear_on_alu_work():
    s = schedule(["[B-:R-:W-:-:S04] FADD R4, R1, R2", "[B-:R-:W-:Y:S04] FMUL R5, R6, R7", EXIT])
    assert s.why_edit_illegal(("yield", P, 1)) is None
    assert s.why_edit_illegal(("yield", P + 1, 0)) is None
    e = s.apply_edit(("yield", P, 1))
    assert isinstance(e, Edit) and s.yield_[P] and s._max_stall[P] == control.MAX_STALL_YIELD
    assert s.why_edit_illegal(("yield", P, 1)) == "yield: no change"
    s.undo()
    assert not s.yield_[P] and s._max_stall[P] == control.MAX_STALL


def test_yield_refused_on_pinned_and_with_a_stall_above_11():
    s = schedule([f"{NOB} MOV R40, RZ", "[B-:R-:W-:-:S02] BAR.SYNC.DEFER_BLOCKING 0x0",
                  "[B-:R-:W-:-:S13] FADD R4, R1, R2", "[B-:R-:W-:-:S11] FADD R5, R1, R2", EXIT])
    assert (s.why_edit_illegal(("yield", P + 1, 1)) or "").startswith("pinned")
    assert "above 11" in (s.why_edit_illegal(("yield", P + 2, 1)) or "")
    assert s.why_edit_illegal(("yield", P + 3, 1)) is None  # the control: stall 11


def test_yield_never_cleared_in_a_polling_loop():
    loop = ["[B-:R-:W-:Y:S04] FADD R4, R1, R2", "[B-:R-:W-:Y:S02] NANOSLEEP 0x20",
            f"{NOB} @P0 BRA 0x50", EXIT]  # the BRA at slot P+2 jumps back to 0x50 = slot P
    s = schedule(loop)
    assert s.analysis.loops() == [(P, P + 3)]
    assert "polls" in (s.why_edit_illegal(("yield", P, 0)) or "")
    plain = ["[B-:R-:W-:Y:S04] FADD R4, R1, R2", "[B-:R-:W-:Y:S02] FMUL R6, R1, R2", f"{NOB} @P0 BRA 0x50", EXIT]
    assert schedule(plain).why_edit_illegal(("yield", P, 0)) is None


def test_raising_a_stall_is_limited_by_the_yield_bit():
    s = schedule(["[B-:R-:W-:Y:S04] FADD R4, R1, R2", "[B-:R-:W-:-:S04] FMUL R5, R6, R7", EXIT])
    assert s.why_edit_illegal(("stall", P, 11)) is None
    assert "above 11" in (s.why_edit_illegal(("stall", P, 12)) or "")
    assert s.why_edit_illegal(("stall", P + 1, 15)) is None
    assert "above 15" in (s.why_edit_illegal(("stall", P + 1, 16)) or "")


# --- reuse ---------------------------------------------------------------------------------------------
FFMA2 = ["[B-:R-:W-:Y:S01] FFMA R10, R2.reuse, R3, R10", "[B-:R-:W-:Y:S01] FFMA R11, R2, R4, R11", EXIT]


def test_reuse_clear_is_always_allowed_and_set_needs_the_proof():
    s = schedule(FFMA2)
    assert s.reuse()[P] == 1 and s.reuse_settable(P) == 1
    s.apply_edit(("reuse", P, 0))
    assert s.reuse()[P] == 0
    assert s.why_edit_illegal(("reuse", P, 1)) is None  # the next FFMA reads R2 in the same slot
    s.apply_edit(("reuse", P, 1))
    assert s.reuse()[P] == 1
    assert (s.why_edit_illegal(("reuse", P, 3)) or "").startswith("reuse: flags 0x2")  # never set by ptxas


@pytest.mark.parametrize(("second", "why"), [
    ("FFMA R11, R5, R2, R11", "register in another operand slot"),
    ("FMUL R11, R2, R4", "another opcode"),
    ("@P0 FFMA R11, R2, R4, R11", "another guard"),
    ("FFMA R11, R20, R4, R11", "another register"),
])
def test_reuse_set_refused_without_the_same_reader_next(second, why):
    s = schedule([FFMA2[0], f"[B-:R-:W-:Y:S01] {second}", EXIT])
    s.apply_edit(("reuse", P, 0))
    assert (s.why_edit_illegal(("reuse", P, 1)) or "").startswith("reuse"), why


def test_reuse_set_refused_when_the_instruction_writes_the_register():
    s = schedule(["[B-:R-:W-:Y:S01] FFMA R2, R2.reuse, R3, R10", "[B-:R-:W-:Y:S01] FFMA R11, R2, R4, R11", EXIT])
    s.apply_edit(("reuse", P, 0))
    assert (s.why_edit_illegal(("reuse", P, 1)) or "").startswith("reuse")


def test_a_move_clears_reuse_and_undo_brings_it_back():
    s = schedule([*FFMA2[:2], "[B-:R-:W-:Y:S01] MOV R40, RZ", EXIT])
    s.apply(P + 2, UP)  # the MOV now follows the first FFMA: its flag is dropped
    assert s.reuse()[P] == 0 and s.reuse_settable(P) == 0
    assert (s.why_edit_illegal(("reuse", P, 1)) or "").startswith("reuse")
    s.undo()
    assert s.reuse()[P] == 1


# --- stall lowering --------------------------------------------------------------------------------------
LOWER = ["[B-:R-:W-:-:S15] FADD R4, R1, R2", "[B-:R-:W-:-:S15] IMAD R9, R10, R11, RZ",
         "[B-:R-:W-:-:S02] FMUL R5, R4, R3", f"{NOB} MOV R50, RZ", EXIT]


def test_stall_lowered_only_while_the_fixed_latency_is_covered():
    s = schedule(LOWER)
    # FADD → FMUL had 30 cycles; the table's cap for FADD is 16, so 14 may go, from either stall
    assert s.stall_floor(P) == 1
    assert s.stall_floor(P + 1) == 12  # IMAD → block exit: 19 cycles, 16 needed
    assert s.why_edit_illegal(("stall", P, 1)) is None
    s.apply_edit(("stall", P, 1))
    assert s.stall_floor(P + 1) == 15  # now the IMAD's 15 cycles are what keeps the FMUL waiting
    assert (s.why_edit_illegal(("stall", P + 1, 14)) or "").startswith("stall: lowering")
    s.undo()
    assert s.stall[P] == 15 and s.stall_floor(P + 1) == 12


def test_stall_never_lowered_below_the_minimum_or_on_variable_latency_or_scoreboards():
    s = schedule(["[B-:R-:W-:-:S15] FADD R4, R1, R2", "[B-:R-:W0:-:S15] LDG.E R6, [R2.64]",
                  "[B-:R-:W-:-:S15] MUFU.EX2 R7, R8", "[B0:R-:W-:-:S15] FMUL R9, R6, R3",
                  f"{NOB} MOV R50, RZ", EXIT])
    assert "minimum" in (s.why_edit_illegal(("stall", P, 0)) or "")
    assert "variable-latency" in (s.why_edit_illegal(("stall", P + 1, 8)) or "")
    assert "variable-latency" in (s.why_edit_illegal(("stall", P + 2, 8)) or "")
    assert "scoreboard" in (s.why_edit_illegal(("stall", P + 3, 8)) or "")


def test_lowered_stall_then_a_move_keeps_every_distance():
    s = schedule(LOWER)
    s.apply_edit(("stall", P, 1))
    # moving the FMUL above the IMAD would leave 1 of the 16 cycles: repaired on the FADD, or refused
    why = s.why_illegal(P + 2, UP)
    if why is None:
        s.apply(P + 2, UP)
        assert s.stall[P] >= 15
    else:
        assert why.startswith("distance")


# --- the verifier on real cubins --------------------------------------------------------------------------
SM90 = [p for p in CUBINS if p.name == "softmax.sm90.cubin"]
#: sm_90 fixtures where ptxas left a stall the table's caps prove can be lowered (few do: see the report)
LOWERABLE = [p for p in CUBINS if p.name == "tma_matmul.sm90.cubin"]


def _words_with(s: Schedule, x: int, fn) -> bytes:
    """The schedule's cubin with instruction ``x``'s word passed through ``fn`` (bypassing every engine rule)."""
    assert s.cubin is not None
    text = s.cubin.text(s.kernel)
    data = bytearray(s.to_cubin(verify=False))
    off = text.offset + 16 * int(s.pos[x])
    w = int.from_bytes(data[off:off + 16], "little")
    data[off:off + 16] = fn(w).to_bytes(16, "little")
    return bytes(data)


@pytest.mark.parametrize("path", SM90, ids=lambda p: p.stem)
def test_verifier_rejects_a_stall_lowered_below_a_fixed_latency(path, fixture_schedule):
    s = fixture_schedule(path)
    an = s.analysis
    tight = [(int(p), int(c)) for p, c, r in zip(an.cons_p, an.cons_c, an.cons_req)
             if p < an.n and c == p + 1 and r == an.sems[p].stall and an.sems[p].stall > 1
             and not an.sems[p].pinned and not an.sems[p].variable and not an.sems[p].sets and not an.sems[p].wait]
    assert tight, "no tight fixed-latency pair in this fixture"
    p, _c = tight[0]
    assert (s.why_edit_illegal(("stall", p, 1)) or "").startswith("stall: lowering")
    bad = _words_with(s, p, lambda w: control.with_stall(w, 1))
    problems = s.verifier().check(bad)
    assert any(pr.startswith("distance") for pr in problems), problems


@pytest.mark.parametrize("path", LOWERABLE, ids=lambda p: p.stem)
def test_verifier_accepts_engine_edits_and_rejects_unproven_ones(path, fixture_schedule):
    s = fixture_schedule(path)
    an = s.analysis
    # an accepted rewrite with every kind: a lowered stall, a yield toggle, a reuse flag cleared
    low = next(x for x in range(an.n) if s.stall_floor(x) < s.stall[x]
               and s.why_edit_illegal(("stall", x, s.stall_floor(x))) is None)
    s.apply_edit(("stall", low, s.stall_floor(low)))
    y = next(x for x in range(an.n) if s.why_edit_illegal(("yield", x, int(not s.yield_[x]))) is None)
    s.apply_edit(("yield", y, int(not s.yield_[y])))
    r = next(x for x in range(an.n) if s.reuse()[x])
    s.apply_edit(("reuse", r, 0))
    s.to_cubin(verify=True, disassemble_check=True)
    # a reuse flag ptxas never set, on an instruction that had none: rejected
    plain = next(x for x in range(an.n) if not an.sems[x].pinned and s.reuse()[x] == 0 and not an.reuse_map[x])
    s.reset()
    problems = s.verifier().check(_words_with(s, plain, lambda w: control.with_reuse(w, 1)))
    assert any("reuse flags" in pr for pr in problems), problems
    # a yield bit cleared on a pinned instruction: rejected
    pin = next(x for x in range(an.n) if an.sems[x].pinned and s._yield0[x])
    problems = s.verifier().check(_words_with(s, pin, lambda w: control.with_yield(w, False)))
    assert any("yield bit" in pr and "pinned" in pr for pr in problems), problems
    # yield set on a word whose stall is above 11
    hi = [x for x in range(an.n) if s.stall[x] > control.MAX_STALL_YIELD and not s._yield0[x]]
    if hi:
        problems = s.verifier().check(_words_with(s, hi[0], lambda w: control.with_yield(w, True)))
        assert any("beyond what its yield bit allows" in pr for pr in problems), problems


@pytest.mark.parametrize("path", SM90, ids=lambda p: p.stem)
def test_verifier_rejects_a_reuse_flag_whose_next_reader_changed(path, fixture_schedule):
    s = fixture_schedule(path)
    an = s.analysis
    # an instruction with ptxas's reuse flag, then a legal move that puts a different instruction after it
    for x in range(an.n):
        if not s.reuse()[x] or x + 1 >= an.n:
            continue
        t = x + 1
        for slot, d in ((t, DOWN), (t + 1, UP)):
            if s.is_legal(slot, d):
                s.apply(slot, d)
                nxt = s.next_instruction(x)
                if nxt is not None and not s.reuse_settable(x):
                    assert s.reuse()[x] == 0  # the engine dropped it
                    flags = int(s._reuse0[x])
                    problems = s.verifier().check(_words_with(s, x, lambda w, f=flags: control.with_reuse(w, f)))
                    assert any("reuse flags" in pr for pr in problems), problems
                    return
                s.undo()
    pytest.fail("no reuse-flagged instruction with a legal neighbouring move")


def test_reuse_flags_and_the_yield_bit_go_together():
    # seen (Triton 3.6, sm_90): ptxas writes reuse flags only with the yield bit, and nvdisasm prints no
    # .reuse on a word whose yield bit is clear; the engine never writes that combination
    s = schedule(FFMA2)
    assert "reuse flags" in (s.why_edit_illegal(("yield", P, 0)) or "")
    s.apply_edit(("reuse", P, 0))
    assert s.why_edit_illegal(("yield", P, 0)) is None
    s.apply_edit(("yield", P, 0))
    assert "no yield bit" in (s.why_edit_illegal(("reuse", P, 1)) or "")


@pytest.mark.parametrize("path", SM90, ids=lambda p: p.stem)
def test_verifier_rejects_reuse_flags_without_yield(path, fixture_schedule):
    s = fixture_schedule(path)
    x = next(x for x in range(s.n) if s.reuse()[x] and s.analysis.sems[x].pinned is None)
    problems = s.verifier().check(_words_with(s, x, lambda w: control.with_yield(w, False)))
    assert any("without the yield bit" in pr for pr in problems), problems
