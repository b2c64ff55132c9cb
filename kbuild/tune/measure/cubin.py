"""The few cubin facts measurement needs: target architecture, ``.text`` sections, digests, control bits.

A deliberately small ELF64 reader (the full reader, decoder and rewriter live in
:mod:`kbuild.sass`); it lets the worker refuse a cubin for another architecture before loading
it, lets the evaluation cache key candidates by their ``.text`` bytes, and lets tests and the
fault-isolation demo patch scheduling control bits (bits 105-125 of each 16-byte instruction word,
see ``design/SASS.md``).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass


class CubinFormatError(ValueError):
    """The bytes are not a 64-bit little-endian ELF cubin."""


@dataclass(frozen=True)
class Section:
    name: str
    offset: int
    size: int


def _check(cubin: bytes) -> None:
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        raise CubinFormatError("not a 64-bit little-endian ELF file (a cubin starts with \\x7fELF)")


def sections(cubin: bytes) -> list[Section]:
    """All sections with their names, file offsets and sizes."""
    _check(cubin)
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    if shnum == 0:
        return []
    if shoff + shnum * shentsize > len(cubin) or shstrndx >= max(shnum, 1):
        raise CubinFormatError("section header table lies outside the file")
    raw = []
    for i in range(shnum):
        base = shoff + i * shentsize
        name_off, _type, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", cubin, base)
        raw.append((name_off, off, size))
    str_off, str_size = raw[shstrndx][1], raw[shstrndx][2]
    strtab = cubin[str_off:str_off + str_size]
    out = []
    for name_off, off, size in raw:
        end = strtab.find(b"\0", name_off)
        out.append(Section(strtab[name_off:end].decode("ascii", "replace"), off, size))
    return out


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
    """Compute capability the cubin was built for, as major*10+minor (80, 90, ...).

    CUDA ELF ABI versions before 8 keep the SM in the low byte of ``e_flags``; version 8 and
    later keep it in bits 8-15."""
    _check(cubin)
    abi_version = cubin[8]
    flags, = struct.unpack_from("<I", cubin, 0x30)
    return (flags >> 8) & 0xFF if abi_version >= 8 else flags & 0xFF


# ----------------------------------------------------------------------------------------------
# Control bits of one 128-bit instruction word (sm_70 .. sm_90).


@dataclass(frozen=True)
class Control:
    stall: int
    yield_: int
    write_barrier: int
    read_barrier: int
    wait_mask: int
    reuse: int


def control(word: bytes) -> Control:
    v = int.from_bytes(word, "little")
    return Control(stall=(v >> 105) & 0xF, yield_=(v >> 109) & 1, write_barrier=(v >> 110) & 7,
                   read_barrier=(v >> 113) & 7, wait_mask=(v >> 116) & 0x3F, reuse=(v >> 122) & 0xF)


def with_control(word: bytes, *, wait_mask: int | None = None, reuse: int | None = None) -> bytes:
    """The word with its wait mask and/or reuse flags replaced."""
    v = int.from_bytes(word, "little")
    if wait_mask is not None:
        v = (v & ~(0x3F << 116)) | ((wait_mask & 0x3F) << 116)
    if reuse is not None:
        v = (v & ~(0xF << 122)) | ((reuse & 0xF) << 122)
    return v.to_bytes(16, "little")


def patch_text(cubin: bytes, fn: object, *, only: str | None = None) -> tuple[bytes, int]:
    """Apply ``fn(index, word) -> word`` to every instruction word of the ``.text`` sections
    (or of ``.text.<only>``); returns the new cubin and the number of words that changed."""
    assert callable(fn)
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
