"""kbuild's one reader for NVIDIA cubins (64-bit little-endian ELF), and an in-place patcher.

Only what kbuild needs: the section table, ``.text.<kernel>``, the ``.nv.info`` attribute records
(which general ELF libraries do not decode), relocation offsets into a kernel's text, the CUDA
architecture from the header, and what a kernel's interface looks like to the driver: its parameter
layout (``EIATTR_KPARAM_INFO``), its required block size (``EIATTR_REQNTID``) and whether it uses
shared memory (a ``.nv.shared.<kernel>`` section), which the run time compares with an index entry. The SASS engine and measurement (:mod:`kbuild.tune.measure.cubin`)
both read cubins through this module. The tests check the section table and the relocations against
pyelftools. Every malformed input raises :class:`kbuild.errors.UsageError` naming the file.

The architecture follows the CUDA ELF ABI version in ``e_ident[EI_ABIVERSION]``: up to version 7 the SM
number is the low byte of ``e_flags`` and bit 11 (0x800) marks the arch-specific variant (``sm_90a``);
from version 8 (CUDA 12.9's sm_100 and later, OS/ABI byte 0x41 instead of 0x33) the SM number is bits
8–15 and bit 3 marks it. Seen on
Triton 3.6 cubins: ``0x500550`` (sm_80), ``0x560556`` (sm_86), ``0x590559`` (sm_89), ``0x5a0d5a``
(sm_90a), all version 7; ptxas 12.9 wrote ``0x600640a`` for sm_100a and ``0x6007802`` for sm_120, version 8.
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
#: The OS/ABI byte of ABI-version-8 cubins (seen: ptxas 12.9 for sm_100a and sm_120).
ELFOSABI_CUDA_V2 = 0x41
#: The first CUDA ELF ABI version that moved the SM number to bits 8–15 of ``e_flags``.
ELFABIVERSION_CUDA_V2 = 8
SHT_SYMTAB = 2
SHT_STRTAB = 3
SHT_RELA = 4
SHT_REL = 9
SHT_NOBITS = 8
SHDR_SIZE = 64  # Elf64_Shdr
REL_SIZE, RELA_SIZE = 16, 24  # Elf64_Rel, Elf64_Rela
#: ``.nv.info`` attributes of the CUDA ELF format that describe a kernel's interface; the same code and
#: layout in every family kbuild has seen (sm_80 to sm_90a, ABI version 7; sm_100a and sm_120, version 8).
EIATTR_REQNTID = 0x10  # three u32: the block size the kernel was compiled for (.reqntid)
EIATTR_KPARAM_INFO = 0x17  # per parameter: u32 index, u16 ordinal, u16 offset, u32 flags (size in bits 18-31)
EIATTR_CBANK_PARAM_SIZE = 0x19  # u16: bytes of parameters in the constant bank

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


@dataclass(frozen=True)
class KernelParam:
    """One kernel parameter as ``EIATTR_KPARAM_INFO`` records it: position, byte offset and size."""

    ordinal: int
    offset: int
    size: int


class Cubin:
    """A parsed cubin. ``data`` is the original bytes; nothing here mutates it."""

    def __init__(self, data: bytes, origin: str = "<bytes>") -> None:
        self.data = bytes(data)
        self.origin = origin
        if len(data) < 64 or data[:4] != ELF_MAGIC:
            raise UsageError(f"{origin}: not a cubin (no ELF header); pass a .cubin file compiled for CUDA")
        if data[4] != 2 or data[5] != 1:
            raise UsageError(f"{origin}: not a cubin (expected a 64-bit little-endian ELF)")
        if data[7] not in (ELFOSABI_CUDA, ELFOSABI_CUDA_V2):
            raise UsageError(f"{origin}: an ELF file but not a CUDA cubin (OS/ABI 0x{data[7]:02x}, expected 0x33 "
                             "or 0x41)")
        self.abi_version = data[8]
        (self.e_flags,) = struct.unpack_from("<I", data, 48)
        self.sections: list[Section] = self._section_table()
        self._by_name = {s.name: s for s in self.sections}

    def _bad(self, what: str) -> UsageError:
        return UsageError(f"{self.origin}: malformed cubin: {what}")

    def _section_table(self) -> list[Section]:
        """Read and check the section table: every malformation is a :class:`UsageError` naming the file."""
        data = self.data
        shoff, = struct.unpack_from("<Q", data, 40)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 58)
        if shnum == 0:
            raise self._bad("no section table (e_shnum is 0)")
        if shentsize != SHDR_SIZE:
            raise self._bad(f"section headers of {shentsize} bytes (e_shentsize), expected {SHDR_SIZE}")
        if shoff < 64 or shoff + shnum * SHDR_SIZE > len(data):
            raise self._bad(f"the section table (e_shoff {shoff:#x}, {shnum} entries) lies outside the "
                            f"{len(data)}-byte file; truncated?")
        if shstrndx >= shnum:
            raise self._bad(f"e_shstrndx {shstrndx} names no section (the file has {shnum})")
        raw = []
        for i in range(shnum):
            name, typ, flags, _addr, off, size, link, info, _align, entsize = struct.unpack_from(
                "<IIQQQQIIQQ", data, shoff + SHDR_SIZE * i)
            if typ != SHT_NOBITS and off + size > len(data):
                raise self._bad(f"section {i} (offset {off:#x}, {size} bytes) runs past the end of the "
                                f"{len(data)}-byte file; truncated?")
            raw.append((name, typ, flags, off, size, link, info, entsize))
        _name, strtab_type, _f, strtab_off, strtab_size, *_rest = raw[shstrndx]
        if strtab_type != SHT_STRTAB:
            raise self._bad(f"e_shstrndx {shstrndx} is not a string table (section type {strtab_type})")
        strtab = data[strtab_off:strtab_off + strtab_size]
        sections = []
        for i, (name, typ, flags, off, size, link, info, entsize) in enumerate(raw):
            end = strtab.find(b"\0", name)
            sname = strtab[name:end if end >= 0 else None].decode("latin-1")
            sec = Section(i, sname, typ, flags, off, size, link, info, entsize)
            if sname.startswith(".text.") and (typ == SHT_NOBITS or size % 16):
                raise self._bad(f"{sname} is {'not stored in the file' if typ == SHT_NOBITS else f'{size} bytes'}"
                                "; instructions are 16 bytes each")
            if typ in (SHT_REL, SHT_RELA) and _reloc_entry_size(sec) != (RELA_SIZE if typ == SHT_RELA else REL_SIZE):
                raise self._bad(f"relocation section {sname or i} has {entsize}-byte entries")
            sections.append(sec)
        return sections

    # --- basic queries -----------------------------------------------------------------------
    @property
    def sm(self) -> int:
        """The SM number the cubin was built for (80, 86, 89, 90, ...), by the ELF ABI version's rule."""
        if self.abi_version >= ELFABIVERSION_CUDA_V2:
            return (self.e_flags >> 8) & 0xFF
        return self.e_flags & 0xFF

    @property
    def arch_specific(self) -> bool:
        """Built for the arch-specific variant (``sm_90a``: wgmma, TMA, setmaxnreg)."""
        bit = 0x8 if self.abi_version >= ELFABIVERSION_CUDA_V2 else 0x800
        return bool(self.e_flags & bit)

    @property
    def arch(self) -> str:
        """The target as ptxas named it: ``sm_80``, ``sm_90a``."""
        return f"sm_{self.sm}{'a' if self.arch_specific else ''}"

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

    def params(self, kernel: str) -> list[KernelParam]:
        """The kernel's parameters in order (``EIATTR_KPARAM_INFO`` of ``.nv.info.<kernel>``)."""
        out = []
        for rec in self.nvinfo(kernel):
            if rec.attr != EIATTR_KPARAM_INFO or rec.section == ".nv.info":
                continue
            if rec.fmt != 0x04 or len(rec.value) != 12:
                raise self._bad(f"{rec.section}: a parameter record of {len(rec.value)} bytes, expected 12")
            _index, ordinal, offset, flags = struct.unpack("<IHHI", rec.value)
            out.append(KernelParam(ordinal, offset, flags >> 18))
        out.sort(key=lambda p: p.ordinal)
        if [p.ordinal for p in out] != list(range(len(out))):
            raise self._bad(f".nv.info.{kernel}: parameter ordinals {[p.ordinal for p in out]} are not 0..n-1")
        return out

    def required_threads(self, kernel: str) -> tuple[int, int, int] | None:
        """The block size the kernel was compiled for (``EIATTR_REQNTID``), or None when it records none."""
        for rec in self.nvinfo(kernel):
            if rec.attr == EIATTR_REQNTID and rec.section != ".nv.info":
                if rec.fmt != 0x04 or len(rec.value) != 12:
                    raise self._bad(f"{rec.section}: a block-size record of {len(rec.value)} bytes, expected 12")
                x, y, z = struct.unpack("<III", rec.value)
                return x, y, z
        return None

    def uses_shared_memory(self, kernel: str) -> bool:
        """Whether the kernel addresses shared memory: ptxas emits ``.nv.shared.<kernel>`` for static and
        dynamic (``extern .shared``) use alike, and none for a kernel that uses none (Triton 3.6 cubins:
        softmax and matmul have one, an elementwise kernel has none)."""
        return self.section(f".nv.shared.{kernel}") is not None

    # --- relocations ---------------------------------------------------------------------------
    def relocation_offsets(self, kernel: str) -> list[int]:
        """Byte offsets into ``.text.<kernel>`` that a relocation patches."""
        text = self.text(kernel)
        offs: list[int] = []
        for sec in self.sections:
            if sec.type in (SHT_REL, SHT_RELA) and sec.info == text.index:
                offs.extend(self.relocation_entries(sec))
        return offs

    def relocation_entries(self, sec: Section) -> list[int]:
        """``r_offset`` of every entry of the relocation section ``sec``."""
        ent = _reloc_entry_size(sec)
        raw = self.section_bytes(sec)
        return [int(struct.unpack_from("<Q", raw, pos)[0]) for pos in range(0, len(raw) - ent + 1, ent)]


def _reloc_entry_size(sec: Section) -> int:
    return sec.entsize or (RELA_SIZE if sec.type == SHT_RELA else REL_SIZE)


#: Largest cubin read from a file (the store's cap on a cubin, :data:`kbuild.cache.record.MAX_BLOB_BYTES`, too).
MAX_CUBIN_BYTES = 256 << 20


def load(path: str | os.PathLike[str]) -> Cubin:
    """The cubin in the file ``path``, read with :func:`kbuild.fsutil.read_bounded` (a regular file of at most
    :data:`MAX_CUBIN_BYTES`); a :class:`UsageError` naming the file otherwise."""
    p = Path(path)
    try:
        data = fsutil.read_bounded(p, max_bytes=MAX_CUBIN_BYTES)
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
