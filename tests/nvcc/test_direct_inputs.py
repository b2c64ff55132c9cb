"""Issue 32, item 1: kbuild-nvcc's direct mode never answers with a stale object when an input outside argv
changes: options files (``--options-file``, ``-optf``, nested, an include directory switched inside one), response
files (``-Xcompiler @h.rsp``, nested), and the environment variables nvcc's profile appends (``INCLUDES``,
``PTXAS_FLAGS``). Each case compiles twice (the second a direct hit, so that the direct mode is in play), changes
the input, compiles again and compares with the launcher's uncached compile of the changed input. An argument the
shell nvcc runs its steps through would expand runs plain nvcc, saying why once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

SOURCE = r"""
#include "ver.h"
extern "C" __global__ void k(int *x) { x[threadIdx.x] = VER * (int)threadIdx.x; }
extern "C" int ver() { return VER; }
"""

ARGS = ["-c", "v.cu", "-o", "v.o", "-arch=sm_80"]


@dataclass
class Case:
    """Files to write, the arguments and environment before, and what changes (files, environment after)."""

    files: dict[str, str]
    args: list[str]
    env: dict[str, str]
    change: dict[str, str]
    env_after: dict[str, str] | None = None


def _inc(cu: Path) -> Callable[[str], str]:
    return lambda name: str(cu / name)


def cases(cu: Path) -> dict[str, Case]:
    inc = _inc(cu)
    header = {"ver.h": "#pragma once\n"}
    return {
        "options-file": Case({**header, "o.txt": "-DVER=111\n"}, [*ARGS, "--options-file", "o.txt"], {},
                             {"o.txt": "-DVER=222\n"}),
        "optf": Case({**header, "o.txt": "-DVER=111\n"}, [*ARGS, "-optf", "o.txt"], {}, {"o.txt": "-DVER=222\n"}),
        "nested options file": Case({**header, "o.txt": "-O3 --options-file o2.txt\n", "o2.txt": "-DVER=111\n"},
                                    [*ARGS, "--options-file=o.txt"], {}, {"o2.txt": "-DVER=222\n"}),
        "include dir switched in an options file": Case(
            {"inc1/ver.h": "#define VER 111\n", "inc2/ver.h": "#define VER 222\n", "o.txt": "-I inc1\n"},
            [*ARGS, "-optf", "o.txt"], {}, {"o.txt": "-I inc2\n"}),
        "response file": Case({**header, "h.rsp": "-DVER=111\n"}, [*ARGS, "-Xcompiler", "@h.rsp"], {},
                              {"h.rsp": "-DVER=222\n"}),
        "nested response file": Case({**header, "h.rsp": "-O2 @h2.rsp\n", "h2.rsp": "-DVER=111\n"},
                                     [*ARGS, "-Xcompiler", "@h.rsp"], {}, {"h2.rsp": "-DVER=222\n"}),
        "INCLUDES": Case({"inc1/ver.h": "#define VER 111\n", "inc2/ver.h": "#define VER 222\n"}, ARGS,
                         {"INCLUDES": f"-I{inc('inc1')}"}, {}, {"INCLUDES": f"-I{inc('inc2')}"}),
        "PTXAS_FLAGS": Case({"ver.h": "#define VER 111\n"}, ARGS, {}, {}, {"PTXAS_FLAGS": "-O0"}),
    }


CASES = ["options-file", "optf", "nested options file", "include dir switched in an options file", "response file",
         "nested response file", "INCLUDES", "PTXAS_FLAGS"]


def _write(cu: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (cu / name).parent.mkdir(parents=True, exist_ok=True)
        (cu / name).write_text(text)


@pytest.mark.hostile(fault="stale nvcc input", outcome="served correct bytes")
@pytest.mark.parametrize("name", CASES)
def test_a_changed_input_outside_argv_is_never_answered_with_the_old_object(nvcc, launcher, cu, name):
    (cu / "v.cu").write_text(SOURCE)
    case = cases(cu)[name]
    _write(cu, case.files)
    first = launcher(nvcc, *case.args, cwd=cu, env=case.env)
    assert first.returncode == 0, first.stderr
    old = (cu / "v.o").read_bytes()
    again = launcher(nvcc, *case.args, cwd=cu, env=case.env)
    assert again.count("nvcc", "direct-hit") == 1  # the direct mode answers the unchanged compile
    _write(cu, case.change)
    env = case.env if case.env_after is None else case.env_after
    changed = launcher(nvcc, *case.args, cwd=cu, env=env)
    assert changed.returncode == 0, changed.stderr
    assert changed.count("nvcc", "direct-hit") == 0
    ref_args = [a if a != "v.o" else "ref.o" for a in case.args]
    ref = launcher(nvcc, *ref_args, cwd=cu, env={**env, "KBUILD_NVCC_CACHE": "off"})
    assert ref.returncode == 0, ref.stderr
    assert (cu / "v.o").read_bytes() == (cu / "ref.o").read_bytes() != old
    # and back: the first entry answers again, with the first object
    _write(cu, case.files)
    back = launcher(nvcc, *case.args, cwd=cu, env=case.env)
    assert back.count("nvcc", "direct-hit") == 1 and (cu / "v.o").read_bytes() == old


MSG_SOURCE = r"""
extern "C" __global__ void k(int *x) { x[0] = 1; }
extern "C" const char *msg() { return MSG; }
"""


@pytest.mark.hostile(fault="shell expansion in nvcc arguments", outcome="degraded with warning")
def test_an_argument_the_shell_expands_runs_plain_nvcc_and_says_so_once(nvcc, launcher, cu):
    (cu / "v.cu").write_text(MSG_SOURCE)
    (cu / "w.cu").write_text(MSG_SOURCE)
    expanded = '-DMSG="`echo kbx_from_the_shell`"'
    res = launcher(nvcc, "-c", "v.cu", "-o", "v.o", "-arch=sm_80", expanded, cwd=cu)
    assert res.returncode == 0, res.stderr
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("kbuild-nvcc: warning")]
    assert len(warnings) == 1 and "command substitution" in warnings[0] and "echo kbx_from_the_shell" in warnings[0]
    assert res.count("nvcc", "plain") == 1
    assert not [e for e in res.events if e["action"] in ("stored", "direct-stored", "hit", "direct-hit")]
    obj = (cu / "v.o").read_bytes()
    assert b"kbx_from_the_shell" in obj and b"`echo" not in obj  # what nvcc's shell made of it, as plain nvcc
    # the next unit of the same build with the same argument: plain again, the reason in the log, no second line
    other = launcher(nvcc, "-c", "w.cu", "-o", "w.o", "-arch=sm_80", expanded, cwd=cu)
    assert other.returncode == 0 and other.count("nvcc", "plain") == 1
    assert "kbuild-nvcc: warning" not in other.stderr
    assert b"kbx_from_the_shell" in (cu / "w.o").read_bytes()


@pytest.mark.hostile(fault="shell expansion in nvcc arguments", outcome="degraded with warning")
def test_an_unquoted_redirection_in_a_host_option_runs_plain_nvcc(nvcc, launcher, cu):
    """``-Xcompiler -DY=1>y.txt``: nvcc pastes the value bare, its shell redirects the host compiler's output."""
    (cu / "v.cu").write_text(MSG_SOURCE.replace("MSG", '"m"'))
    res = launcher(nvcc, "-c", "v.cu", "-o", "v.o", "-arch=sm_80", "-Xcompiler", "-DY=1>y.txt", cwd=cu)
    assert res.returncode == 0, res.stderr
    assert res.count("nvcc", "plain") == 1 and "the operator '>'" in res.stderr
    assert (cu / "y.txt").is_file()  # as plain nvcc does
