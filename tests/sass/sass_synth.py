"""Build synthetic kernels from text for the rule tests.

Each line is ``[B<wait>:R<rbar>:W<wbar>:<Y|->:S<stall>] <instruction text>``, the notation of
``kbuild sass show``; e.g. ``[B0:R-:W1:Y:S02] @!P0 LDG.E R4, [R2.64]``. Control flow instructions
(BRA, EXIT, ...) are flagged like nvdisasm does.
"""

from __future__ import annotations

import re
from pathlib import Path

from kbuild.sass import control
from kbuild.sass.deps import Analysis, analyze_parts
from kbuild.sass.disasm import Instruction, split_operands
from kbuild.sass.elf import NvInfoRecord
from kbuild.sass.isa import arch_spec
from kbuild.sass.schedule import Schedule

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sass"
CUBINS = sorted(FIXTURES.glob("*.cubin"))

_LINE = re.compile(r"^\[B([0-5]*|-):R([0-5-]):W([0-5-]):([Y-]):S(\d\d)\]\s+(.*)$")
_CF = {"BRA", "EXIT", "BSSY", "BSYNC", "CALL", "RET", "BREAK", "WARPSYNC", "ELECT"}


def word(index: int, wait: str, rbar: str, wbar: str, yld: str, stall: int) -> int:
    w = index + 1  # a distinct body per instruction
    w |= stall << control.STALL_SHIFT
    w |= (1 if yld == "Y" else 0) << control.YIELD_SHIFT
    w |= (7 if wbar == "-" else int(wbar)) << control.WBAR_SHIFT
    w |= (7 if rbar == "-" else int(rbar)) << control.RBAR_SHIFT
    mask = 0 if wait == "-" else sum(1 << int(k) for k in wait)
    w |= mask << control.WAIT_SHIFT
    return w


def instruction(index: int, text: str) -> Instruction:
    guard = ""
    if text.startswith("@"):
        guard, text = text.split(None, 1)
    opcode, _, rest = text.partition(" ")
    ops = list(split_operands(rest.replace(" ", "")))
    extra = ""
    if opcode.split(".")[0] in ("P2R", "R2P") and "PR" in ops:
        ops.remove("PR")
        extra = "PR"
    return Instruction(index, opcode, tuple(ops), guard, extra, opcode.split(".")[0] in _CF)


#: Five MOVs of 15 cycles start every synthetic kernel unless ``prologue=False``: they keep the
#: distance-to-block-entry rule out of tests about other rules. Line k of a test is slot k + 5.
PROLOGUE = [f"[B-:R-:W-:-:S15] MOV R{200 + k}, RZ" for k in range(5)]
P = len(PROLOGUE)


def build(lines: list[str], sm: int = 90, nvinfo: list[NvInfoRecord] | None = None,
          relocs: list[int] | None = None, prologue: bool = True) -> Analysis:
    if prologue:
        lines = PROLOGUE + list(lines)
    ins, words = [], []
    for i, line in enumerate(lines):
        m = _LINE.match(line.strip())
        assert m, line
        wait, rbar, wbar, yld, stall, text = m.groups()
        x = instruction(i, text)
        ins.append(x)
        # ``.reuse`` on the k-th annotated operand sets reuse bit k (a stand-in for ptxas's slot encoding)
        flags = (1 << sum(o.endswith(".reuse") for o in x.operands)) - 1
        words.append(word(i, wait, rbar, wbar, yld, int(stall)) | flags << control.REUSE_SHIFT)
    return analyze_parts("synthetic", ins, words, arch_spec(sm), nvinfo or [], relocs or [])


def schedule(lines: list[str], **kw) -> Schedule:
    return Schedule(None, build(lines, **kw))


def swap_reason(lines: list[str], upper: int = 0, **kw) -> str | None:
    """Why lines ``upper`` and ``upper + 1`` cannot swap (None: they can)."""
    s = schedule(lines, **kw)
    if kw.get("prologue", True):
        upper += P
    why = s.why_illegal(upper, 1)
    assert why == s.why_illegal(upper + 1, 0)
    mask = s.legal_moves()
    assert bool(mask[upper, 1]) == (why is None), (why, mask[upper])
    return why
