"""Kernel parameter (and kernel) names that are C keywords, macros or the launcher's own names.

Triton authors name parameters as Python allows: ``char``, ``auto``, ``stream``, ``args``, ``NULL``
are all fine in Python and used to break the generated C ("redeclared as different kind of
symbol"). Each case renders the launchers and compiles them with the system gcc against Triton's
``cuda.h``: the ``.c`` file as C (and C++ where noted), and the header the way a user's C or C++
extension includes it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hooks_helpers import build_env, kbuild_cli

from kbuild.cache import Artefact
from kbuild.emit import EmitError, EmitKernel, c_name_problem, cuda_include_dir, render_sources, write_files
from kbuild.targets import parse_target
from kbuild.templates import TEMPLATE_DIR

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
CSRC = Path(__file__).parent / "csrc"

# Written out here, not taken from kbuild.emit, so that a keyword the module forgets is still tried.
C_KEYWORDS = """
    auto break case char const continue default do double else enum extern float for goto if inline int long
    register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
    _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn _Static_assert _Thread_local
    alignas alignof bool constexpr false nullptr static_assert thread_local true typeof typeof_unqual
    _BitInt _Decimal32 _Decimal64 _Decimal128 asm _Float16 _Float32 _Float64 _Float128 _Float32x _Float64x
""".split()
CXX_KEYWORDS = """
    and and_eq bitand bitor catch char8_t char16_t char32_t class compl concept consteval constinit const_cast
    co_await co_return co_yield decltype delete dynamic_cast explicit export friend mutable namespace new noexcept
    not not_eq operator or or_eq private protected public reinterpret_cast requires static_cast template this throw
    try typeid typename using virtual wchar_t xor xor_eq
""".split()
# The names the launcher template used before (issue 13 found "r", "f", "args", "stream").
OLD_LAUNCHER_NAMES = ["stream", "grid_x", "grid_y", "grid_z", "f", "r", "args", "global_scratch", "profile_scratch"]
# Other names of the prototype and its surroundings.
PROTOTYPE_NAMES = ["CUstream", "CUdeviceptr", "CUresult", "int32_t", "uint16_t", "NULL", "CUDA_SUCCESS", "linux",
                   "unix", "KBUILD_API", "KBUILD_KERNEL_COUNT", "KBUILD_KBUILD_KERNELS_H", "__LINE__", "_X", "a__b"]
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def template_identifiers(*names: str) -> list[str]:
    """Every identifier in the templates ``names`` (placeholders removed)."""
    text = "".join((TEMPLATE_DIR / n).read_text() for n in names)
    text = re.sub(r"@[A-Z_]+@", " ", text)
    text = re.sub(r'"(?:[^"\\]|\\.)*"', " ", text)  # string literals
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)  # comments
    return sorted(set(_WORD.findall(text)))


LAUNCHER_NAMES = sorted(set(OLD_LAUNCHER_NAMES) | set(template_identifiers("kernel.c.in", "kernel.h.in")))


def artefact(target: str, params: list[tuple[str, str]], symbol: str = "k") -> Artefact:
    cubin = f"cubin {target} {params}".encode()
    meta = {"symbol": symbol, "num_warps": 4, "shared": 0, "created_at": "x",
            "params": [{"name": n, "type": t, "constexpr": False} for n, t in params]
            + [{"name": "BLOCK", "type": "constexpr", "constexpr": True}], "constexprs": {"BLOCK": 64}}
    return Artefact.create(key=hashlib.sha256(cubin).hexdigest(), cubin=cubin, meta=meta)


def kernel(name: str, params: list[tuple[str, str]], symbol: str = "k") -> EmitKernel:
    return EmitKernel(name, f"pkg.mod:{name}", ((parse_target("sm_80"), artefact("sm_80", params, symbol)),
                                                (parse_target("sm_90"), artefact("sm_90", params, symbol))))


def compile_sources(out: Path, *, cxx: bool = False, std: str = "gnu11") -> None:
    """Compile the generated .c, and a user file that includes the header, as C (or C++); fail with gcc's output."""
    inc = str(cuda_include_dir())
    user = out / "user.c"
    user.write_text('#include <stdio.h>\n#include "kbuild_kernels.h"\nint kb_user(void) { return 0; }\n')
    cmds = []
    for src in (out / "kbuild_kernels.c", user):
        if cxx:
            cmds.append(["g++", "-x", "c++", "-std=gnu++20", "-Wall", "-Werror", "-fsyntax-only", "-I", inc,
                         "-I", str(out), str(src)])
        else:
            cmds.append(["gcc", f"-std={std}", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I", inc,
                         "-I", str(out), str(src)])
    for cmd in cmds:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stderr[-4000:]}"


def prototype(header: str, launcher: str) -> str:
    m = re.search(rf"CUresult {launcher}\((.*?)\);", header, flags=re.S)
    assert m, header
    return m.group(1)


def prototype_names(header: str, launcher: str) -> list[str]:
    return [p.split()[-1] for p in prototype(header, launcher).split(",")]


def render_one(tmp_path: Path, name: str) -> tuple[Path, str]:
    params = [("x", "*fp32"), (name, "i32"), ("n", "i64")]
    write_files(tmp_path, render_sources([kernel("k", params)]))
    return tmp_path, (tmp_path / "kbuild_kernels.h").read_text()


@pytest.fixture(scope="module")
def compiled_together(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The parameter names of the two tests below whose launchers gcc accepted, compiled in one batch.

    One kernel per name (``k0``, ``k1``, ...; parameters as in ``render_one``) in one set of sources, compiled
    as gnu11 and gnu2x: 4 gcc runs instead of 2-4 per name (parsing cuda.h is most of each run's time). If
    the batch fails, the set is empty and every test compiles its own case alone, which names the culprit.
    """
    names = sorted(set(C_KEYWORDS) | set(LAUNCHER_NAMES) | set(PROTOTYPE_NAMES))
    out = tmp_path_factory.mktemp("together")
    write_files(out, render_sources([kernel(f"k{i}", [("x", "*fp32"), (n, "i32"), ("n", "i64")])
                                     for i, n in enumerate(names)]))
    try:
        compile_sources(out)
        compile_sources(out, std="gnu2x")
    except AssertionError:
        return set()
    return set(names)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.hostile(fault="C identifier clash",
                                                                             outcome="served correct bytes"))
                                  for n in C_KEYWORDS])
def test_a_c_keyword_as_parameter_name_compiles(tmp_path: Path, name: str, compiled_together: set[str]):
    out, header = render_one(tmp_path, name)
    names = prototype_names(header, "kbuild_k")
    assert name not in names and names[:4] == ["stream", "grid_x", "grid_y", "grid_z"]
    assert names[4:] == ["x", name + "_" if not name.startswith("_") else "arg" + name + "_", "n"]
    if name not in compiled_together:  # the batch failed: compile this case alone, to name it and show gcc's error
        compile_sources(out)
        compile_sources(out, std="gnu2x")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.hostile(fault="C identifier clash",
                                                                             outcome="served correct bytes"))
                                  for n in sorted(set(LAUNCHER_NAMES) | set(PROTOTYPE_NAMES))])
def test_a_launcher_name_as_parameter_name_compiles(tmp_path: Path, name: str, compiled_together: set[str]):
    out, header = render_one(tmp_path, name)
    names = prototype_names(header, "kbuild_k")
    assert len(set(names)) == len(names), names
    if name not in compiled_together:
        compile_sources(out)


@pytest.mark.hostile(fault="C identifier clash", outcome="served correct bytes")
def test_every_cxx_keyword_and_template_identifier_at_once_compiles_as_c_and_cxx(tmp_path: Path):
    """One kernel whose parameters are every C and C++ keyword and every identifier of the templates
    (file-scope functions, types and macros included), and kernels named after each internal name."""
    names = sorted(set(C_KEYWORDS) | set(CXX_KEYWORDS) | set(LAUNCHER_NAMES) | set(PROTOTYPE_NAMES)
                   | set(template_identifiers("launcher.c.in", "launcher.h.in")))
    internal = sorted({w[len("kb_"):] for w in template_identifiers("launcher.c.in") if w.startswith("kb_")})
    assert {"kernel", "load", "function", "launch", "error"} <= set(internal)
    kernels = [kernel("everything", [(n, "i32") for n in names])]
    kernels += [kernel(n, [("x", "*fp16")], symbol=n) for n in internal]
    write_files(tmp_path, render_sources(kernels))
    header = (tmp_path / "kbuild_kernels.h").read_text()
    kept = prototype_names(header, "kbuild_everything")[4:]
    assert len(kept) == len(names) == len(set(kept))
    header_macros = ("KBUILD_API", "KBUILD_KERNEL_COUNT", "KBUILD_KBUILD_KERNELS_H")
    plain = [n for n in names if c_name_problem(n, extra=header_macros) is None and n not in OLD_LAUNCHER_NAMES[:4]]
    assert {"f", "r", "args", "kb_load", "kbl_args"} <= set(plain)
    assert [k for k, n in zip(kept, names) if n in plain] == plain  # the author's plain names are kept
    compile_sources(tmp_path)
    if shutil.which("g++"):
        compile_sources(tmp_path, cxx=True)


def included_macros(cxx: bool) -> list[str]:
    """The object-like, non-reserved macros defined after including the header's own includes."""
    inc = str(cuda_include_dir())
    cmd = ["g++", "-x", "c++", "-std=gnu++20"] if cxx else ["gcc", "-x", "c", "-std=gnu11"]
    proc = subprocess.run([*cmd, "-dM", "-E", "-I", inc, "-"], input="#include <cuda.h>\n#include <stdint.h>\n",
                          capture_output=True, text=True, check=True)
    names = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("#define ")]
    return sorted(n for n in names if "(" not in n and not n.startswith("_"))


@pytest.mark.hostile(fault="C identifier clash", outcome="served correct bytes")
def test_every_macro_of_the_headers_includes_is_renamed_in_the_prototype(tmp_path: Path):
    """A parameter named like a macro of cuda.h, stdint.h or what they include (NULL, CU_LAUNCH_PARAM_END,
    INT32_MAX, linux...) would be expanded inside the prototype; measured against this gcc and cuda.h."""
    macros = sorted(set(included_macros(False)) | (set(included_macros(True)) if shutil.which("g++") else set()))
    assert {"NULL", "CUDA_VERSION", "INT32_MAX", "linux"} <= set(macros)
    assert [m for m in macros if c_name_problem(m) is None] == []
    write_files(tmp_path, render_sources([kernel("k", [(m, "i32") for m in macros])]))
    header = (tmp_path / "kbuild_kernels.h").read_text()
    assert not set(prototype_names(header, "kbuild_k")) & set(macros)
    compile_sources(tmp_path)
    if shutil.which("g++"):
        compile_sources(tmp_path, cxx=True)


@pytest.mark.parametrize(("prefix", "name", "fragment"), [
    ("kbuild_", "last_error", "'kbuild_last_error' is a macro of the generated header"),
    ("kb_", "k", "own namespace"),
    ("kbk_", "k", "own namespace"),
    ("", "int", "a C keyword"),
    ("", "class", "a C++ keyword"),
    ("", "NULL", "macro of cuda.h"),
    ("", "KERNEL_COUNT", "macro of the generated header"),
    ("", "stream", "launcher argument"),
    ("", "_k", "reserved"),
])
@pytest.mark.hostile(fault="C identifier clash", outcome="clean error")
def test_launcher_names_that_cannot_be_c_names_are_refused(prefix: str, name: str, fragment: str):
    with pytest.raises(EmitError) as err:
        render_sources([kernel(name, [("x", "*fp32")])], prefix=prefix)
    assert fragment in str(err.value)


@pytest.mark.parametrize("bad", ["x); system(\"rm -rf /\"); (void)(0", "a b", "", 7, None, "x\n#define k"])
@pytest.mark.hostile(fault="malformed artefact metadata", outcome="clean error")
def test_a_parameter_name_that_is_no_identifier_is_refused_not_pasted_into_c(bad: object):
    k = EmitKernel("k", "m:k", ((parse_target("sm_90"), artefact("sm_90", [(bad, "i32")])),))  # type: ignore[list-item]
    with pytest.raises(EmitError, match="is not an identifier"):
        render_sources([k])


@pytest.mark.hostile(fault="malformed artefact metadata", outcome="served correct bytes")
def test_an_odd_entry_symbol_is_a_valid_c_string(tmp_path: Path):
    symbol = 'k"\n??/\\ü'
    write_files(tmp_path, render_sources([kernel("k", [("x", "*fp32")], symbol=symbol)]))
    compile_sources(tmp_path, std="c11")  # -std=c11 turns trigraphs on


# ---- run: the values reach the right argument slots --------------------------------------------------------

HOSTILE_TRIPLES = [("stream", "char", "args"), ("r", "f", "int"), ("grid_x", "NULL", "kbl_args")]


@pytest.mark.parametrize("names", [pytest.param(t, id="-".join(t), marks=pytest.mark.hostile(
    fault="C identifier clash", outcome="served correct bytes")) for t in HOSTILE_TRIPLES])
def test_launcher_with_hostile_parameter_names_passes_each_value_in_its_slot(tmp_path: Path, names: tuple[str, ...]):
    """The runtime harness of test_hooks_launcher_runtime (kernel "scale": pointer, i32, float) against
    the fake libcuda, with the three parameters renamed."""
    params = list(zip(names, ["*fp32", "i32", "fp32"]))
    arts = []
    for target in ("sm_80", "sm_90"):
        cubin = f"cubin-for-{target}".encode() + b"\0"
        meta = {"symbol": "scale_kernel", "num_warps": 4, "shared": 0, "num_ctas": 1, "global_scratch_size": 0,
                "created_at": "x", "params": [{"name": n, "type": t, "constexpr": False} for n, t in params]}
        arts.append((parse_target(target), Artefact.create(key=hashlib.sha256(cubin).hexdigest(), cubin=cubin,
                                                           meta=meta)))
    write_files(tmp_path, render_sources([EmitKernel("scale", "pkg.mod:scale", tuple(arts))], prefix="kbt_"))
    inc = str(cuda_include_dir())
    lib = tmp_path / "lib"
    lib.mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-I", inc, "-o", str(lib / "libcuda.so.1"),
                    str(CSRC / "fake_cuda.c"), "-lpthread"], check=True)
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I", str(tmp_path), "-I", inc,
                    "-o", str(tmp_path / "harness"), str(CSRC / "harness.c"), str(tmp_path / "kbuild_kernels.c"),
                    str(lib / "libcuda.so.1"), f"-Wl,-rpath,{lib}", "-ldl", "-lpthread"], check=True)
    log = tmp_path / "fake.log"
    proc = subprocess.run([str(tmp_path / "harness"), "basic"], capture_output=True, text=True, check=False,
                          env={"PATH": os.environ.get("PATH", ""), "FAKE_LOG": str(log), "FAKE_CC": "90"})
    assert proc.stdout.splitlines() == ["result 0 ", "result 0 "], proc.stdout + proc.stderr
    launches = [line for line in log.read_text().splitlines() if line.startswith("launch ")]
    assert "grid=4,2,1" in launches[0] and "stream=3 out=4096 n=123 scale=2.5 scratch=0,0" in launches[0]
    assert "out=8192 n=7 scale=1 " in launches[1]


# ---- a real Triton kernel --------------------------------------------------------------------------------

HOSTILE_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def kernel(stream, args, r, f, char, int, auto, NULL, linux, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(args + offs, mask=m) * f + r
    tl.store(stream + offs, v + char + int + auto + NULL + linux, mask=m)
'''


@pytest.mark.hostile(fault="C identifier clash", outcome="served correct bytes")
def test_a_triton_kernel_with_such_parameter_names_goes_through_emit_and_compiles(tmp_path: Path):
    pkg = tmp_path / "hostile_names"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "k.py").write_text(HOSTILE_KERNEL)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.kbuild]\ntargets = ["sm_90"]\ntune = "off"\n[[tool.kbuild.kernels]]\nname = "kernel"\n'
        'source = "hostile_names.k:kernel"\nsignature = { stream = "*fp32", args = "*fp32", r = "fp32", '
        'f = "fp32", char = "i32", int = "i32", auto = "i32", NULL = "i32", linux = "i32", n = "i32" }\n'
        "constexprs = { BLOCK = 128 }\n")
    out = tmp_path / "out"
    env = build_env(tmp_path / "store", PYTHONPATH=str(tmp_path), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    proc = kbuild_cli("emit", "--config", str(tmp_path / "pyproject.toml"), "--out-dir", str(out), env=env,
                      cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    header = (out / "kbuild_kernels.h").read_text()
    assert prototype_names(header, "kbuild_kernel") == [
        "stream", "grid_x", "grid_y", "grid_z", "stream_", "args", "r", "f", "char_", "int_", "auto_", "NULL_",
        "linux_", "n"]
    compile_sources(out)
    if shutil.which("g++"):
        compile_sources(out, cxx=True)
