"""``kbuild sass``: the verbs, and clear errors on bad input."""

from __future__ import annotations

import json
import os
import stat

import pytest
from sass_synth import FIXTURES

from kbuild.cli import main

SOFTMAX = FIXTURES / "softmax.sm90.cubin"


def run(capsys, *argv):
    rc = main(["sass", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_fuzz_json(capsys):
    rc, out, _ = run(capsys, "fuzz", SOFTMAX, "--kernel", "softmax_kernel", "--sequences", "50",
                     "--max-depth", "16", "--seed", "3", "--json")
    assert rc == 0
    doc = json.loads(out)
    assert {"sequences", "verified", "mismatches", "verifier_rejections", "pinned_fraction"} <= doc.keys()
    assert doc["sequences"] == doc["verified"] == 50 and doc["mismatches"] == 0


def test_stats_reports_pinned_and_unknown(capsys):
    rc, out, _ = run(capsys, "stats", FIXTURES / "tma_matmul.sm90.cubin", "--json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["pinned"] > 0 and "Hopper async (wgmma)" in doc["pinned_reasons"]
    assert doc["unknown_opcodes"] == {}


def test_show_and_diff_and_verify(capsys, tmp_path):
    import numpy as np

    from kbuild.sass import Schedule
    from kbuild.sass.fuzz import random_walk

    rc, out, _ = run(capsys, "show", SOFTMAX, "--json")
    assert rc == 0 and json.loads(out)["instructions"][0]["offset"] == 0
    s = Schedule.from_cubin(SOFTMAX)
    random_walk(s, 6, np.random.default_rng(2))
    new = tmp_path / "new.cubin"
    s.write(new)
    rc, out, _ = run(capsys, "verify", SOFTMAX, new, "--json")
    assert rc == 0 and json.loads(out)["accepted"] is True
    rc, out, _ = run(capsys, "diff", SOFTMAX, new, "--json")
    assert rc == 0 and json.loads(out)["moved"]
    bad = tmp_path / "bad.cubin"
    data = bytearray(SOFTMAX.read_bytes())
    assert s.cubin is not None
    t = s.cubin.text(s.kernel)
    i = next(k for k in range(s.n - 1) if s.analysis.sems[k].writes & s.analysis.sems[k + 1].reads
             and s.analysis.block_of[k] == s.analysis.block_of[k + 1])
    a, b = t.offset + 16 * i, t.offset + 16 * i + 16
    data[a:a + 16], data[b:b + 16] = data[b:b + 16], data[a:a + 16]
    bad.write_bytes(bytes(data))
    rc, out, _ = run(capsys, "verify", SOFTMAX, bad, "--json", "--no-disassemble")
    assert rc == 7 and json.loads(out)["accepted"] is False  # ExitCode.REJECTED


def test_not_a_cubin(capsys, tmp_path):
    p = tmp_path / "x.cubin"
    p.write_bytes(b"hello, not an ELF file at all" * 4)
    rc, _, err = run(capsys, "stats", p)
    assert rc == 2 and "not a cubin" in err
    rc, _, err = run(capsys, "stats", tmp_path / "missing.cubin")
    assert rc == 2 and "cannot read" in err


def test_unknown_kernel(capsys):
    rc, _, err = run(capsys, "fuzz", SOFTMAX, "--kernel", "nope", "--sequences", "1")
    assert rc == 2 and "no kernel named 'nope'" in err and "softmax_kernel" in err


def test_architecture_without_table(capsys, tmp_path):
    data = bytearray(SOFTMAX.read_bytes())
    data[48] = 75  # e_flags low byte: sm_75
    p = tmp_path / "sm75.cubin"
    p.write_bytes(bytes(data))
    rc, _, err = run(capsys, "stats", p)
    assert rc == 2 and "no SASS table for sm_75" in err


def test_nvdisasm_missing_or_failing(capsys, tmp_path, kbuild_env):
    kbuild_env.set(nvdisasm=tmp_path / "no-such-nvdisasm")
    rc, _, err = run(capsys, "stats", SOFTMAX)
    assert rc == 2 and "no such file" in err
    fake = tmp_path / "nvdisasm"
    fake.write_text("#!/bin/sh\necho 'nvdisasm fatal : broken' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    kbuild_env.set(nvdisasm=fake)
    before = set(os.listdir(tmp_path))
    rc, _, err = run(capsys, "fuzz", SOFTMAX, "--sequences", "2")
    assert rc == 3 and "nvdisasm" in err and "repro:" in err
    assert set(os.listdir(tmp_path)) == before
    fake.write_text("#!/bin/sh\necho 'not json'\n")
    rc, _, err = run(capsys, "stats", SOFTMAX)
    assert rc == 3 and "not JSON" in err


@pytest.mark.parametrize("args", [["--sequences", "0"], ["--max-depth", "0"]])
def test_fuzz_bad_numbers(capsys, args):
    rc, _, _err = run(capsys, "fuzz", SOFTMAX, *args)
    assert rc == 2
