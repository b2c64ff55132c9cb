"""A small reader for NVIDIA cubins (64-bit little-endian ELF) and an in-place patcher.

Only what the SASS engine needs: the section table, ``.text.<kernel>``, the ``.nv.info`` attribute
records, relocation offsets into a kernel's text, and the CUDA architecture from ``e_flags``. Every
malformed input raises :class:`kbuild.errors.UsageError` naming the file.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from kbuild import fsutil
from kbuild.errors import UsageError

ELF_MAGIC = b"\x7fELF"
ELFOSABI_CUDA = 0x33
SHT_SYMTAB = 2
SHT_RELA = 4
SHT_REL = 9
SHT_NOBITS = 8

@dataclass(frozen=True)
class Section:
    index: int
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int


@dataclass(frozen=True)
class NvInfoRecord:
    """One ``.nv.info`` attribute: ``fmt``, ``attr``, and where its value sits in the file. What an
    attribute code means is per architecture family: :attr:`kbuild.sass.isa.ArchSpec.nvinfo`."""

    section: str
    fmt: int
    attr: int
    value_offset: int  # absolute file offset of the value
    value: bytes


class Cubin:
    """A parsed cubin. ``data`` is the original bytes; nothing here mutates it."""

    def __init__(self, data: bytes, origin: str = "<bytes>") -> None:
        self.data = bytes(data)
        self.origin = origin
        if len(data) < 64 or data[:4] != ELF_MAGIC:
            raise UsageError(f"{origin}: not a cubin (no ELF header); pass a .cubin file compiled for CUDA")
        if data[4] != 2 or data[5] != 1:
            raise UsageError(f"{origin}: not a cubin (expected a 64-bit little-endian ELF)")
        if data[7] != ELFOSABI_CUDA:
            raise UsageError(f"{origin}: an ELF file but not a CUDA cubin (OS/ABI 0x{data[7]:02x}, expected 0x33)")
        (self.e_flags,) = struct.unpack_from("<I", data, 48)
        shoff, = struct.unpack_from("<Q", data, 40)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 58)
        if shoff == 0 or shentsize != 64 or shoff + shnum * 64 > len(data):
            raise UsageError(f"{origin}: truncated or malformed cubin (section table out of range)")
        raw = []
        for i in range(shnum):
            name, typ, flags, _addr, off, size, link, info, _align, entsize = struct.unpack_from(
                "<IIQQQQIIQQ", data, shoff + 64 * i)
            if typ != SHT_NOBITS and off + size > len(data):
                raise UsageError(f"{origin}: truncated cubin (section {i} runs past the end of the file)")
            raw.append((name, typ, flags, off, size, link, info, entsize))
        strtab_off, strtab_size = raw[shstrndx][3], raw[shstrndx][4]
        strtab = data[strtab_off:strtab_off + strtab_size]
        self.sections: list[Section] = []
        for i, (name, typ, flags, off, size, link, info, entsize) in enumerate(raw):
            end = strtab.find(b"\0", name)
            sname = strtab[name:end if end >= 0 else None].decode("latin-1")
            self.sections.append(Section(i, sname, typ, flags, off, size, link, info, entsize))
        self._by_name = {s.name: s for s in self.sections}

    # --- basic queries -----------------------------------------------------------------------
    @property
    def sm(self) -> int:
        """The SM number the cubin was built for (``e_flags`` low byte, e.g. 80 or 90)."""
        low = self.e_flags & 0xFF
        if low >= 20:
            return low
        return (self.e_flags >> 8) & 0xFF

    def section(self, name: str) -> Section | None:
        return self._by_name.get(name)

    def section_bytes(self, sec: Section) -> bytes:
        return self.data[sec.offset:sec.offset + sec.size]

    def kernels(self) -> list[str]:
        return [s.name[len(".text."):] for s in self.sections if s.name.startswith(".text.")]

    def text(self, kernel: str) -> Section:
        sec = self.section(f".text.{kernel}")
        if sec is None:
            names = ", ".join(self.kernels()) or "none"
            raise UsageError(f"{self.origin}: no kernel named {kernel!r} in this cubin (kernels: {names})")
        if sec.size % 16:
            raise UsageError(f"{self.origin}: .text.{kernel} is {sec.size} bytes, not a multiple of 16")
        return sec

    def default_kernel(self, kernel: str | None) -> str:
        if kernel:
            self.text(kernel)
            return kernel
        ks = self.kernels()
        if len(ks) != 1:
            raise UsageError(f"{self.origin}: {len(ks)} kernels in this cubin ({', '.join(ks)}); pick one with --kernel")
        return ks[0]

    # --- nv.info --------------------------------------------------------------------------------
    def nvinfo(self, kernel: str) -> list[NvInfoRecord]:
        """Records of ``.nv.info.<kernel>`` and of the global ``.nv.info``."""
        out: list[NvInfoRecord] = []
        for name in (f".nv.info.{kernel}", ".nv.info"):
            sec = self.section(name)
            if sec is None:
                continue
            raw = self.section_bytes(sec)
            pos = 0
            while pos + 2 <= len(raw):
                fmt, attr = raw[pos], raw[pos + 1]
                if fmt == 0x04:
                    if pos + 4 > len(raw):
                        raise UsageError(f"{self.origin}: {name}: truncated attribute at byte {pos}")
                    (size,) = struct.unpack_from("<H", raw, pos + 2)
                    vstart, vend = pos + 4, pos + 4 + size
                elif fmt in (0x01, 0x02, 0x03):  # NVAL / BVAL / HVAL: the value sits in the next 2 bytes
                    vstart, vend = pos + 2, pos + 4
                else:
                    raise UsageError(f"{self.origin}: {name}: unknown attribute format 0x{fmt:02x} at byte {pos}")
                if vend > len(raw):
                    raise UsageError(f"{self.origin}: {name}: attribute 0x{attr:02x} runs past the section")
                out.append(NvInfoRecord(name, fmt, attr, sec.offset + vstart, raw[vstart:vend]))
                pos = vend
        return out

    # --- relocations ---------------------------------------------------------------------------
    def relocation_offsets(self, kernel: str) -> list[int]:
        """Byte offsets into ``.text.<kernel>`` that a relocation patches."""
        text = self.text(kernel)
        offs: list[int] = []
        for sec in self.sections:
            if sec.type not in (SHT_REL, SHT_RELA) or sec.info != text.index:
                continue
            ent = sec.entsize or (24 if sec.type == SHT_RELA else 16)
            raw = self.section_bytes(sec)
            for pos in range(0, len(raw) - ent + 1, ent):
                (r_offset,) = struct.unpack_from("<Q", raw, pos)
                offs.append(int(r_offset))
        return offs


def load(path: str | os.PathLike[str]) -> Cubin:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise UsageError(f"{p}: cannot read ({exc.strerror or exc})") from None
    return Cubin(data, str(p))


def patch(data: bytes, patches: list[tuple[int, bytes]]) -> bytes:
    """Return ``data`` with each ``(offset, bytes)`` written over it; sizes never change."""
    buf = bytearray(data)
    for off, chunk in patches:
        if off < 0 or off + len(chunk) > len(buf):
            raise ValueError(f"patch at {off} of {len(chunk)} bytes is outside the {len(buf)}-byte file")
        buf[off:off + len(chunk)] = chunk
    return bytes(buf)


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (:func:`kbuild.fsutil.write_atomic`)."""
    fsutil.write_atomic(path, data)
