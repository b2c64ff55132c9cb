"""The few cubin facts measurement needs: target architecture, ``.text`` sections, digests, control bits.

Everything is read through kbuild's one cubin reader (:mod:`kbuild.sass.elf`) and its one control-code
decoder (:mod:`kbuild.sass.control`); this module only adapts them to bytes in, bytes out. It lets the
worker refuse a cubin for another architecture before loading it, lets the evaluation cache key
candidates by their ``.text`` bytes, and lets tests and the fault-isolation demo patch scheduling
control bits (bits 105-125 of each 16-byte instruction word, see :mod:`kbuild.sass.control`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from kbuild.errors import KBuildError
from kbuild.sass import control as _control
from kbuild.sass.control import Control
from kbuild.sass.elf import Cubin, Section

__all__ = ["Control", "CubinFormatError", "Section", "control", "cubin_arch", "cubin_digest", "parse",
           "patch_text", "sections", "text_bytes", "text_digest", "text_sections", "with_control",
           "without_reuse", "without_waits"]


class CubinFormatError(ValueError):
    """The bytes are not a well-formed 64-bit little-endian CUDA ELF cubin."""


def parse(cubin: bytes) -> Cubin:
    """The cubin through :class:`kbuild.sass.elf.Cubin`; :class:`CubinFormatError` when malformed."""
    try:
        return Cubin(cubin, "cubin")
    except KBuildError as exc:
        raise CubinFormatError(str(exc)) from None


def sections(cubin: bytes) -> list[Section]:
    """All sections with their names, file offsets and sizes."""
    return list(parse(cubin).sections)


def text_sections(cubin: bytes) -> list[Section]:
    """The ``.text.<kernel>`` sections (the machine code)."""
    return [s for s in sections(cubin) if s.name.startswith(".text.")]


def text_bytes(cubin: bytes) -> bytes:
    """Concatenated machine code of every kernel, in section order."""
    return b"".join(cubin[s.offset:s.offset + s.size] for s in text_sections(cubin))


def text_digest(cubin: bytes) -> str:
    """sha256 of the ``.text`` bytes: equal for candidates that differ only in metadata."""
    return hashlib.sha256(text_bytes(cubin)).hexdigest()


def cubin_digest(cubin: bytes) -> str:
    return hashlib.sha256(cubin).hexdigest()


def cubin_arch(cubin: bytes) -> int:
    """Compute capability the cubin was built for, as major*10+minor (80, 90, ...): :attr:`Cubin.sm`."""
    return parse(cubin).sm


# ----------------------------------------------------------------------------------------------
# Control bits of one 16-byte instruction word, through kbuild.sass.control.


def control(word: bytes) -> Control:
    """The decoded control code of one 16-byte instruction word."""
    return _control.decode(int.from_bytes(word, "little"))


def with_control(word: bytes, *, wait_mask: int | None = None, reuse: int | None = None) -> bytes:
    """The word with its wait mask and/or reuse flags replaced."""
    v = int.from_bytes(word, "little")
    if wait_mask is not None:
        v = _control.with_wait(v, wait_mask & 0x3F)
    if reuse is not None:
        v = _control.with_reuse(v, reuse & 0xF)
    return v.to_bytes(16, "little")


def patch_text(cubin: bytes, fn: Callable[[int, bytes], bytes], *, only: str | None = None) -> tuple[bytes, int]:
    """Apply ``fn(index, word) -> word`` to every instruction word of the ``.text`` sections
    (or of ``.text.<only>``); returns the new cubin and the number of words that changed."""
    out = bytearray(cubin)
    changed = 0
    for sec in text_sections(cubin):
        if only is not None and sec.name != f".text.{only}":
            continue
        for i in range(sec.size // 16):
            at = sec.offset + 16 * i
            old = bytes(out[at:at + 16])
            new = fn(i, old)
            if new != old:
                out[at:at + 16] = new
                changed += 1
    return bytes(out), changed


def without_waits(cubin: bytes) -> tuple[bytes, int]:
    """Every scoreboard wait removed: a deliberately broken candidate (reads before data arrives)."""
    return patch_text(cubin, lambda _i, w: with_control(w, wait_mask=0))


def without_reuse(cubin: bytes) -> tuple[bytes, int]:
    """Every operand-reuse flag cleared: different ``.text``, same results (reuse is only a cache hint)."""
    return patch_text(cubin, lambda _i, w: with_control(w, reuse=0))
