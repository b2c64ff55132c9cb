"""The scheduling control code of a Volta-through-Hopper instruction word (bits 105–125): kbuild's one
control-code decoder (the SASS engine and measurement both use it).

A word is handled as a Python ``int`` of 128 bits (little-endian bytes). Fields:

====== ======= =================================================================
bits   field   meaning
====== ======= =================================================================
105–108 stall  cycles before the next instruction issues (0–15)
109    yield   scheduler hint
110–112 wbar   scoreboard released when the result is written; 7 = none
113–115 rbar   scoreboard released when the sources have been read; 7 = none
116–121 wait   one bit per scoreboard this instruction waits on
122–125 reuse  operand reuse-cache flags
====== ======= =================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

STALL_SHIFT, STALL_BITS = 105, 4
YIELD_SHIFT = 109
WBAR_SHIFT, RBAR_SHIFT, BAR_BITS = 110, 113, 3
WAIT_SHIFT, WAIT_BITS = 116, 6
REUSE_SHIFT, REUSE_BITS = 122, 4
NO_BARRIER = 7
MAX_STALL = 15
#: With the yield bit set, nvdisasm rejects stalls of 12 and above for some opclasses (the stall and
#: yield bits share an "opex" table). Seen: ISETP and STG with yield and stall 13/12 do not decode.
MAX_STALL_YIELD = 11
#: The lowest stall a stall-lowering edit may leave. ptxas writes stall 0 only on NOP and BRA in the suite's
#: cubins (Triton 3.6, sm_80/sm_90), so an edit never goes below 1.
MIN_STALL_EDIT = 1

#: Every control bit (105–125); an instruction's "body" is its word with these cleared.
CONTROL_MASK = ((1 << 21) - 1) << STALL_SHIFT
STALL_MASK = ((1 << STALL_BITS) - 1) << STALL_SHIFT
REUSE_MASK = ((1 << REUSE_BITS) - 1) << REUSE_SHIFT
WAIT_MASK = ((1 << WAIT_BITS) - 1) << WAIT_SHIFT


@dataclass(frozen=True)
class Control:
    stall: int
    yield_: bool
    wbar: int
    rbar: int
    wait: int
    reuse: int

    def barriers_set(self) -> int:
        """Bit mask of the scoreboards this instruction sets (write or read barrier)."""
        m = 0
        if self.wbar != NO_BARRIER:
            m |= 1 << self.wbar
        if self.rbar != NO_BARRIER:
            m |= 1 << self.rbar
        return m

    def __str__(self) -> str:
        w = "".join(str(k) for k in range(6) if self.wait >> k & 1) or "-"
        wb = "-" if self.wbar == NO_BARRIER else str(self.wbar)
        rb = "-" if self.rbar == NO_BARRIER else str(self.rbar)
        return f"[B{w}:R{rb}:W{wb}:{'Y' if self.yield_ else '-'}:S{self.stall:02d}]"


def _field(word: int, shift: int, bits: int) -> int:
    return (word >> shift) & ((1 << bits) - 1)


def decode(word: int) -> Control:
    return Control(
        stall=_field(word, STALL_SHIFT, STALL_BITS),
        yield_=bool(_field(word, YIELD_SHIFT, 1)),
        wbar=_field(word, WBAR_SHIFT, BAR_BITS),
        rbar=_field(word, RBAR_SHIFT, BAR_BITS),
        wait=_field(word, WAIT_SHIFT, WAIT_BITS),
        reuse=_field(word, REUSE_SHIFT, REUSE_BITS),
    )


def max_stall(word: int) -> int:
    """The highest stall this word may carry: 11 with the yield bit set, else 15."""
    return MAX_STALL_YIELD if _field(word, YIELD_SHIFT, 1) else MAX_STALL


def stall(word: int) -> int:
    return _field(word, STALL_SHIFT, STALL_BITS)


def with_stall(word: int, value: int) -> int:
    if not 0 <= value <= MAX_STALL:
        raise ValueError(f"stall {value} outside 0..{MAX_STALL}")
    return (word & ~STALL_MASK) | (value << STALL_SHIFT)


def with_yield(word: int, value: bool) -> int:
    """``word`` with its yield bit set or cleared."""
    return (word & ~(1 << YIELD_SHIFT)) | (int(bool(value)) << YIELD_SHIFT)


def with_wait(word: int, mask: int) -> int:
    """``word`` with its wait mask replaced (one bit per scoreboard 0–5)."""
    if not 0 <= mask < 1 << WAIT_BITS:
        raise ValueError(f"wait mask {mask:#x} outside 0..0x3f")
    return (word & ~WAIT_MASK) | (mask << WAIT_SHIFT)


def with_reuse(word: int, flags: int) -> int:
    """``word`` with its operand-reuse flags replaced (0 clears them)."""
    if not 0 <= flags < 1 << REUSE_BITS:
        raise ValueError(f"reuse flags {flags:#x} outside 0..0xf")
    return (word & ~REUSE_MASK) | (flags << REUSE_SHIFT)


def body(word: int) -> int:
    """The word without its control code: what identifies the operation and its operands."""
    return word & ~CONTROL_MASK


def split_words(data: bytes):
    """``(lo, hi)`` numpy uint64 arrays of the words in ``data`` (bits 0–63 and 64–127)."""
    import numpy as np

    arr = np.frombuffer(data, dtype="<u8").reshape(-1, 2)
    return arr[:, 0].copy(), arr[:, 1].copy()


def join_words(lo, hi) -> bytes:
    import numpy as np

    arr = np.empty((len(lo), 2), dtype="<u8")
    arr[:, 0], arr[:, 1] = lo, hi
    return arr.tobytes()


#: The same fields as seen from the high 64-bit half of a word.
HI_STALL_SHIFT = STALL_SHIFT - 64
HI_REUSE_SHIFT = REUSE_SHIFT - 64
HI_STALL_MASK = STALL_MASK >> 64
HI_REUSE_MASK = REUSE_MASK >> 64
HI_CONTROL_MASK = CONTROL_MASK >> 64
HI_YIELD_SHIFT = YIELD_SHIFT - 64
HI_YIELD_MASK = 1 << HI_YIELD_SHIFT


def words_from_bytes(data: bytes) -> list[int]:
    if len(data) % 16:
        raise ValueError("instruction bytes must be a multiple of 16")
    return [int.from_bytes(data[i:i + 16], "little") for i in range(0, len(data), 16)]


def words_to_bytes(words: list[int]) -> bytes:
    return b"".join(w.to_bytes(16, "little") for w in words)
