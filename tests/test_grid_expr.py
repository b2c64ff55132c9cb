"""Grid expressions (kbuild/declarations/grid.py, issue 15): the grammar, the errors naming the key, and the Python
evaluator against the C code the launchers run, compiled with gcc (hypothesis draws the expressions and
the argument values, edge values of int64 included)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbuild.declarations import grid as g
from kbuild.emit import cuda_include_dir
from kbuild.errors import ConfigError
from kbuild.settings.sources import settings_from_table


def test_cdiv_min_max_and_floor_semantics():
    grid = g.parse_grid(["cdiv(M, BLOCK) * cdiv(N, 64)", "max(B, 1)", "min(7 // 2, -7 // 2 + 10, 9 % 4)"])
    assert grid.evaluate({"M": 1000, "BLOCK": 128, "N": 65, "B": 0}) == (8 * 2, 1, 1)
    assert g.parse_grid(["-7 // 2", "-7 % 3 + 5"]).evaluate_raw({}) == ((-4, 7, 1), 0)  # Python's floor semantics
    assert g.parse_grid(["M"]).evaluate({"M": 5}) == (5, 1, 1)  # missing dimensions are 1


@pytest.mark.parametrize("text, fragment", [
    ("M / 2", "operator /"), ("M ** 2", "operator **"), ("1.5", "float literal"), ("True", "bool literal"),
    ("M.x", "attribute access"), ("M[0]", "indexing"), ("M if N else 1", "conditional"), ("M < N", "comparison"),
    ("abs(M)", "calling abs"), ("cdiv(M)", "cdiv takes two"), ("min(M)", "two or more"), ("M // 0", "literal 0"),
    ("M % 0", "literal 0"), ("cdiv(M, 0)", "literal 0"), ("M +", "not an expression"), ("", "empty"),
    ("cdiv", "is a function"), ("max(M, N, key=1)", "keyword"), ("2**70", "operator **"), ("9" * 30, "64 bits"),
    ("-(" * 40 + "1" + ")" * 40, "nested"), ("__import__('os')", "calling __import__"), ("lambda: 1", "lambda"),
])
def test_expressions_outside_the_grammar_are_refused(text: str, fragment: str):
    with pytest.raises(g.GridExprError, match=fragment.replace("*", r"\*").replace("(", r"\(")):
        g.parse_expr(text)


BASE: dict[str, Any] = {"targets": ["sm_80"], "kernels": [{
    "name": "mm", "source": "pkg.m:mm", "signature": {"a": "*fp16", "M": "i32", "N": "i64", "x": "fp32", "f": "i1"},
    "constexprs": {"BLOCK_M": 64, "SLOPE": 0.5, "ACT": "relu"}, "space": {"BLOCK_M": [64, 128]},
    "grid": ["cdiv(M, BLOCK_M)", "N"]}]}


def with_grid(*exprs: str) -> dict:
    tbl = {**BASE, "kernels": [{**BASE["kernels"][0], "grid": list(exprs)}]}
    return tbl


@pytest.mark.hostile(fault="bad grid expression", outcome="clean error")
@pytest.mark.parametrize("exprs, index, fragment", [
    (("M / BLOCK_M",), 0, "operator /"), (("1", "a"), 1, "pointer argument (*fp16)"),
    (("1", "1", "x"), 2, "floating-point or boolean argument (fp32)"), (("f",), 0, "boolean argument"),
    (("SLOPE",), 0, "not always an integer (0.5)"), (("ACT",), 0, "not always an integer"),
    (("BLOCK",), 0, "did you mean 'BLOCK_M'"), (("M // 0",), 0, "literal 0"),
])
def test_a_bad_grid_is_a_config_error_naming_file_and_key(exprs, index, fragment):
    with pytest.raises(ConfigError) as info:
        settings_from_table(with_grid(*exprs), where="proj/pyproject.toml", environ={})
    text = str(info.value)
    assert text.startswith("proj/pyproject.toml: "), text
    assert f"[tool.kbuild.kernels][0].grid[{index}]" in text and fragment in text, text
    assert info.value.exit_code == 2


@pytest.mark.hostile(fault="bad grid expression", outcome="clean error")
def test_too_many_grid_entries_name_the_grid_key():
    with pytest.raises(ConfigError, match=r"\[tool.kbuild.kernels\]\[0\]\.grid: expected 1 to 3"):
        settings_from_table(with_grid("1", "1", "1", "1"), environ={})


def test_a_valid_grid_is_accepted():
    s = settings_from_table(BASE, environ={})
    assert s.kernels[0].grid == ["cdiv(M, BLOCK_M)", "N"]


def test_overflow_division_by_zero_and_limits_are_errors():
    with pytest.raises(g.GridEvalError, match="overflow"):
        g.parse_grid(["M * M"]).evaluate({"M": 2**40})
    with pytest.raises(g.GridEvalError, match="division by zero"):
        g.parse_grid(["M // B"]).evaluate({"M": 4, "B": 0})
    with pytest.raises(g.GridEvalError, match="dimension y = 65536"):
        g.parse_grid(["1", "M"]).evaluate({"M": 65536})
    with pytest.raises(g.GridEvalError, match="dimension x = -1"):
        g.parse_grid(["M"]).evaluate({"M": -1})
    assert g.parse_grid(["M"]).evaluate({"M": 2**31 - 1}) == (2**31 - 1, 1, 1)
    with pytest.raises(g.GridEvalError, match="division by zero"):  # a constant subtree, at build time
        g.fold(g.parse_expr("M // (B - 64)"), {"B": 64})


# ---- Python against C ----------------------------------------------------------------------------------

NAMES = ("a", "b", "c")


def exprs() -> st.SearchStrategy[str]:
    leaf = st.one_of(st.sampled_from(NAMES),
                     st.sampled_from([0, 1, -1, 2, 3, 7, 64, 2**31, 2**62, 2**63 - 1]).map(str),
                     st.integers(-1000, 1000).map(lambda v: f"({v})"))

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, st.sampled_from(["+", "-", "*", "//", "%"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            inner.map(lambda x: f"-{x}"),
            st.tuples(inner, inner).map(lambda t: f"cdiv({t[0]}, {t[1]})"),
            st.tuples(st.sampled_from(["min", "max"]), st.lists(inner, min_size=2, max_size=3)).map(
                lambda t: f"{t[0]}({', '.join(t[1])})"))

    return st.recursive(leaf, extend, max_leaves=8)


def parseable(text: str) -> bool:
    try:
        g.parse_expr(text)
    except g.GridExprError:
        return False
    return True


@pytest.fixture(scope="module")
def c_eval(tmp_path_factory: pytest.TempPathFactory):
    """A shared library of the C helpers with one exported function per expression, built on demand in batches."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    inc = str(cuda_include_dir())
    root = tmp_path_factory.mktemp("gridc")
    counter = [0]
    cache: dict[tuple[str, ...], list] = {}

    def build(texts: list[str]) -> list:
        if tuple(texts) in cache:
            return cache[tuple(texts)]
        counter[0] += 1
        variables = {"a": "(int64_t)a", "b": "(int64_t)b", "c": "kb_i64_u64(c, &kbl_err)"}
        funcs = []
        for i, text in enumerate(texts):
            funcs.append(f"int64_t e{i}(int32_t a, int64_t b, uint64_t c, int *flags) {{\n  int kbl_err = 0;\n"
                         "  (void)a; (void)b; (void)c;\n"
                         f"  int64_t v = {g.c_expr(g.parse_expr(text), variables)};\n  *flags = kbl_err;\n"
                         "  return v;\n}\n")
        src = root / f"e{counter[0]}.c"
        src.write_text('#include <cuda.h>\n#include <stdint.h>\n#include <stdarg.h>\n#include <stdio.h>\n'
                       'static __thread char kb_error[256];\n'
                       'static void kb_set_error(const char *fmt, ...) { va_list ap; va_start(ap, fmt); '
                       'vsnprintf(kb_error, sizeof kb_error, fmt, ap); va_end(ap); }\n'
                       + g.C_HELPERS + "".join(funcs)
                       + "CUresult dims(int err, const int64_t *gg, unsigned int *out) "
                         "{ return kb_griddims(\"k\", \"sm_90a\", err, gg, out); }\n")
        lib = root / f"e{counter[0]}.so"
        subprocess.run(["gcc", "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-fsanitize=undefined",
                        "-fno-sanitize-recover=all", "-shared", "-fPIC", "-I", inc, "-o", str(lib), str(src)],
                       check=True, capture_output=True)
        dll = ctypes.CDLL(str(lib))
        out = []
        for i in range(len(texts)):
            f = getattr(dll, f"e{i}")
            f.restype = ctypes.c_int64
            f.argtypes = [ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64, ctypes.POINTER(ctypes.c_int)]
            out.append(f)
        dll.dims.restype = ctypes.c_int
        out.append(dll.dims)
        cache[tuple(texts)] = out
        return out

    return build


values = st.fixed_dictionaries({
    "a": st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31)])),
    "b": st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, 1, -1, 2**63 - 1, -(2**63)])),
    "c": st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 2**63 - 1, 2**63, 2**64 - 1])),
})


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.lists(exprs().filter(parseable), min_size=12, max_size=12),
       st.lists(values, min_size=6, max_size=6))
def test_python_and_c_agree_on_value_and_flags(c_eval, texts: list[str], inputs: list[dict[str, int]]):
    """Every expression, at every input: the same value and the same overflow/division-by-zero flags. The C
    is built with UBSan trapping, so a signed overflow the helpers miss fails the test."""
    funcs = c_eval(texts)
    for text, f in zip(texts, funcs):
        tree = g.parse_expr(text)
        for v in inputs:
            value, flags = g.eval_node(tree, v)
            c_flags = ctypes.c_int(0)
            c_value = f(v["a"], v["b"], v["c"], ctypes.byref(c_flags))
            assert c_flags.value == flags, (text, v)
            if not flags:
                assert c_value == value, (text, v)


@settings(max_examples=60, deadline=None)
@given(st.tuples(*[st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([-1, 0, 1, 65535, 65536,
                                                                                  2**31 - 1, 2**31]))] * 3),
       st.sampled_from([0, 1, 2, 3]))
def test_the_c_limit_check_agrees_with_python(c_eval, dims: tuple[int, int, int], flags: int):
    dims_fn = c_eval(["1"])[-1]
    arr = (ctypes.c_int64 * 3)(*dims)
    out = (ctypes.c_uint * 3)()
    rc = dims_fn(flags, arr, out)
    try:
        if flags:
            raise g.GridEvalError("flags", flags)
        g.check_dims(dims)
        ok = True
    except g.GridEvalError:
        ok = False
    assert (rc == 0) == ok, (dims, flags, rc)
    assert rc in (0, 1)  # CUDA_SUCCESS or CUDA_ERROR_INVALID_VALUE
    if ok:
        assert tuple(out) == dims


def test_fold_keeps_names_and_computes_constants():
    tree = g.fold(g.parse_expr("cdiv(M, BLOCK) * (BLOCK // 32)"), {"BLOCK": 128})
    assert g.names_of(tree) == {"M"}
    assert g.eval_node(tree, {"M": 1000}) == ((1000 + 127) // 128 * 4, 0)
