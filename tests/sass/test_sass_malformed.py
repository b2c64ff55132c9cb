"""Malformed cubins (issue 13): a clean one-line error naming the file, exit 2, for every verb that reads one.

Each case corrupts the ELF header or the section table of a real cubin the way a truncated download, a
wrong file or a hostile input would. The reader must refuse it before anything else runs; a property test
over random corruptions of the header and the section table checks that the reader raises nothing but
:class:`kbuild.errors.UsageError`.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hostile_helpers import assert_clean_error
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sass_synth import FIXTURES

from kbuild.cli import main
from kbuild.errors import UsageError
from kbuild.sass.elf import Cubin

GOOD = (FIXTURES / "softmax.sm90.cubin").read_bytes()
SHOFF, SHNUM = struct.unpack_from("<Q", GOOD, 40)[0], struct.unpack_from("<H", GOOD, 60)[0]


def _sec(data: bytes, name: str) -> int:
    c = Cubin(data)
    return next(s.index for s in c.sections if s.name == name)


def _set_section(data: bytes, index: int, field: str, value: int) -> bytes:
    # Elf64_Shdr: name I, type I, flags Q, addr Q, offset Q, size Q, link I, info I, addralign Q, entsize Q
    at = {"type": (4, "<I"), "offset": (24, "<Q"), "size": (32, "<Q"), "entsize": (56, "<Q")}[field]
    b = bytearray(data)
    struct.pack_into(at[1], b, SHOFF + 64 * index + at[0], value)
    return bytes(b)


def _header(data: bytes, off: int, fmt: str, value: int) -> bytes:
    b = bytearray(data)
    struct.pack_into(fmt, b, off, value)
    return bytes(b)


TEXT = _sec(GOOD, ".text.softmax_kernel")
REL = next(s.index for s in Cubin(GOOD).sections if s.type in (4, 9) and s.size)

CASES = {
    "e_shnum=0": _header(GOOD, 60, "<H", 0),
    "e_shstrndx out of range": _header(GOOD, 62, "<H", SHNUM),
    "e_shstrndx=SHN_XINDEX": _header(GOOD, 62, "<H", 0xFFFF),
    "e_shoff past the end": _header(GOOD, 40, "<Q", len(GOOD) + 64),
    "e_shoff overflowing": _header(GOOD, 40, "<Q", 2**64 - 8),
    "e_shentsize=0": _header(GOOD, 58, "<H", 0),
    "truncated file": GOOD[: len(GOOD) // 2],
    "header only": GOOD[:64],
    "text offset past the end": _set_section(GOOD, TEXT, "offset", len(GOOD) + 16),
    "text size overflowing": _set_section(GOOD, TEXT, "size", 2**64 - 16),
    "text as NOBITS": _set_section(GOOD, TEXT, "type", 8),
    "relocation entsize 1": _set_section(GOOD, REL, "entsize", 1),
    "string table past the end": _set_section(GOOD, _sec(GOOD, ".shstrtab"), "offset", 2**63),
}


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("malformed")
    out = {}
    for k, (name, data) in enumerate(CASES.items()):
        p = root / f"bad{k}.cubin"
        p.write_bytes(data)
        out[name] = p
    good = root / "good.cubin"
    good.write_bytes(GOOD)
    out["good"] = good
    return out


def _run(capsys, *argv) -> tuple[int, str]:
    rc = main(["sass", *map(str, argv)])
    _out, err = capsys.readouterr()
    return rc, err


@pytest.mark.hostile(fault="malformed ELF", outcome="clean error")
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("verb", ["show", "stats", "verify-original", "verify-rewritten"])
def test_malformed_cubin_is_a_clean_error(capsys, bad_files, case, verb):
    bad, good = bad_files[case], bad_files["good"]
    if verb == "verify-original":
        rc, err = _run(capsys, "verify", bad, good, "--no-disassemble")
    elif verb == "verify-rewritten":
        rc, err = _run(capsys, "verify", good, bad, "--no-disassemble")
    else:
        rc, err = _run(capsys, verb, bad)
    assert_clean_error(rc, err, names=[str(bad)])
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.hostile(fault="malformed ELF", outcome="clean error")
def test_architecture_without_a_table_names_the_file(capsys, tmp_path):
    p = tmp_path / "sm75.cubin"
    p.write_bytes(_header(GOOD, 48, "<I", 0x4B044B))
    rc, err = _run(capsys, "stats", p)
    assert_clean_error(rc, err, names=[str(p), "sm_75"])


_FIELDS = st.sampled_from([(off, fmt) for off, fmt in [(40, "<Q"), (58, "<H"), (60, "<H"), (62, "<H")]]
                          + [(SHOFF + 64 * i + f, fmt) for i in range(SHNUM)
                             for f, fmt in [(0, "<I"), (4, "<I"), (24, "<Q"), (32, "<Q"), (44, "<I"), (56, "<Q")]])


@pytest.mark.hostile(fault="malformed ELF", outcome="clean error")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(_FIELDS, st.integers(min_value=0, max_value=2**64 - 1)), min_size=1, max_size=3),
       cut=st.integers(min_value=0, max_value=len(GOOD)))
def test_reader_raises_only_usage_errors(edits, cut):
    data = GOOD
    for (off, fmt), value in edits:
        data = _header(data, off, fmt, value % (1 << (8 * struct.calcsize(fmt))))
    data = data[:cut] if cut < 64 else data
    try:
        c = Cubin(data, "fuzzed.cubin")
        for k in c.kernels():
            c.text(k)
            c.nvinfo(k)
            c.relocation_offsets(k)
    except UsageError as exc:
        assert str(exc).startswith("fuzzed.cubin: ") and "\n" not in str(exc)
