"""kbuild's one cubin reader (:mod:`kbuild.sass.elf`), checked against pyelftools on real cubins for
sm_80, sm_86, sm_89 and sm_90a (Triton 3.6) and sm_100a/sm_120 (ptxas 12.9, CUDA ELF ABI version 8).
Measurement's :mod:`kbuild.tune.measure.cubin` reads through it, so both see the same architecture."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest
from sass_synth import CUBINS, FIXTURES

from kbuild.errors import UsageError
from kbuild.sass.elf import Cubin
from kbuild.tune.measure import cubin as mcubin

elftools = pytest.importorskip("elftools")
from elftools.elf.elffile import ELFFile  # noqa: E402
from elftools.elf.relocation import RelocationSection  # noqa: E402

ARCH_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cubins"
#: file → (sm, target name); every architecture the reader must get right
TARGETS = {
    FIXTURES / "softmax.sm80.cubin": (80, "sm_80"),
    ARCH_FIXTURES / "softmax.sm86.cubin": (86, "sm_86"),
    ARCH_FIXTURES / "softmax.sm89.cubin": (89, "sm_89"),
    ARCH_FIXTURES / "fp8_dot.sm89.cubin": (89, "sm_89"),
    FIXTURES / "softmax.sm90.cubin": (90, "sm_90a"),
    FIXTURES / "tma_matmul.sm90.cubin": (90, "sm_90a"),
    ARCH_FIXTURES / "store.sm100a.cubin": (100, "sm_100a"),
    ARCH_FIXTURES / "store.sm120.cubin": (120, "sm_120"),
}
ALL = sorted(set(CUBINS) | set(TARGETS))


@pytest.mark.parametrize("path", list(TARGETS), ids=lambda p: p.stem)
def test_architecture_from_the_header(path):
    data = path.read_bytes()
    sm, name = TARGETS[path]
    c = Cubin(data, str(path))
    assert (c.sm, c.arch) == (sm, name)
    assert mcubin.cubin_arch(data) == sm  # measurement reads the same rule
    e = ELFFile(io.BytesIO(data))
    assert e["e_machine"] == "EM_CUDA" and e["e_ident"]["EI_ABIVERSION"] == c.abi_version
    assert c.abi_version == (8 if sm >= 100 else 7)


def _with_header(data: bytes, abi: int, flags: int) -> bytes:
    b = bytearray(data)
    b[8] = abi
    struct.pack_into("<I", b, 48, flags)
    return bytes(b)


def test_the_abi_version_decides_where_the_sm_number_is():
    """The rule the two readers disagreed on: a version-8 header whose low byte looks like an SM number.
    The old 'low byte >= 20' heuristic read sm_90 here; the SM number of a version-8 cubin is bits 8-15."""
    data = (FIXTURES / "softmax.sm90.cubin").read_bytes()
    v8 = _with_header(data, 8, 0x0600645A)
    assert Cubin(v8).sm == 100 and mcubin.cubin_arch(v8) == 100
    v7 = _with_header(data, 7, 0x00500550)
    assert Cubin(v7).sm == 80 and Cubin(v7).arch == "sm_80"


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_sections_and_relocations_match_pyelftools(path):
    data = path.read_bytes()
    ours = Cubin(data, str(path))
    theirs = ELFFile(io.BytesIO(data))
    assert len(ours.sections) == theirs.num_sections()
    for sec, ref in zip(ours.sections, theirs.iter_sections()):
        h = ref.header
        assert (sec.name, sec.offset, sec.size, sec.link, sec.info, sec.entsize, sec.flags) == (
            ref.name, h["sh_offset"], h["sh_size"], h["sh_link"], h["sh_info"], h["sh_entsize"], h["sh_flags"])
        if isinstance(ref, RelocationSection):
            assert ours.relocation_entries(sec) == [r["r_offset"] for r in ref.iter_relocations()]
    assert [s.name for s in mcubin.text_sections(data)] == [
        s.name for s in theirs.iter_sections() if s.name.startswith(".text.")]


def test_one_control_code_decoder():
    from kbuild.sass import control

    word = (FIXTURES / "softmax.sm90.cubin").read_bytes()[-16:]
    assert mcubin.control(word) == control.decode(int.from_bytes(word, "little"))
    assert mcubin.Control is control.Control


def test_measurement_reports_malformed_cubins_as_its_own_error():
    with pytest.raises(mcubin.CubinFormatError, match="not a cubin"):
        mcubin.cubin_arch(b"MZ not an elf" + b"\0" * 64)
    with pytest.raises(UsageError):
        Cubin(b"MZ not an elf" + b"\0" * 64)


#: file → the parameter sizes its kernel's source gives (tests/fixtures/sass/kernels.py, cubins/make.py: pointers 8,
#: i32 4, ``:1`` arguments compiled away), then Triton 3.6's two scratch pointers; nvcc's sm_100a/sm_120 store
#: kernel takes one pointer and no scratch.
PARAMS = {
    FIXTURES / "softmax.sm80.cubin": [8, 8, 4, 4, 4, 8, 8],
    FIXTURES / "softmax.sm90.cubin": [8, 8, 4, 4, 4, 8, 8],
    ARCH_FIXTURES / "softmax.sm86.cubin": [8, 8, 4, 4, 4, 8, 8],
    ARCH_FIXTURES / "store.sm100a.cubin": [8],
    ARCH_FIXTURES / "store.sm120.cubin": [8],
}


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_parameters_fill_the_parameter_bank_it_declares(path):
    """The parameter records (EIATTR_KPARAM_INFO) agree with the bank size the cubin states separately
    (EIATTR_CBANK_PARAM_SIZE): contiguous up to alignment, ending at that size."""
    c = Cubin(path.read_bytes(), str(path))
    for kernel in c.kernels():
        params = c.params(kernel)
        (bank,) = [struct.unpack("<H", r.value)[0] for r in c.nvinfo(kernel) if r.attr == 0x19]
        assert params and params[-1].offset + params[-1].size == bank
        assert all(p.offset % p.size == 0 and (i == 0 or p.offset >= params[i - 1].offset + params[i - 1].size)
                   for i, p in enumerate(params))
        if path in PARAMS:
            assert [p.size for p in params] == PARAMS[path]
        threads = c.required_threads(kernel)
        assert threads is None or (threads[0] % 32 == 0 and threads[1:] == (1, 1))
