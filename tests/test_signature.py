"""The one kernel-declaration grammar (kbuild.declarations.signature), checked against Triton's own code.

Before it, ``[tool.kbuild.kernels].signature`` (the settings model and kbuild.compile.triton_aot) and bench
specs (kbuild.bench.spec) each had a grammar and an ``ASTSource`` builder; they disagreed on fp8, u1 and the
``k`` prefix, and a spec's ``"i32:1"`` was compiled as a runtime ``i32`` while ``kbuild compile`` made it
the constant 1. These tests hold both call sites to one answer, and that answer to Triton's: its type
parser (``str_to_ty``), its launcher's C types (``ty_to_cpp``), its JIT specialiser and its AOT compiler
(``triton/tools/compile.py``).
"""

from __future__ import annotations

import hashlib
import itertools
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbuild.bench.spec import BenchSpec, BenchSpecError, Config, ast_source, compile_spec, validate_spec
from kbuild.compile import triton_aot
from kbuild.declarations.signature import (
    BOOLEAN_TYPES,
    ELEMENT_TYPES,
    FLOAT_TYPES,
    FP8_TYPES,
    INTEGER_TYPES,
    SCALAR_TYPES,
    ParamType,
    SignatureError,
    ast_source_args,
    is_type,
    parse_type,
)
from kbuild.emit import C_TYPES
from kbuild.errors import ConfigError, KernelSourceError
from kbuild.settings.sources import load_settings, settings_from_table
from kbuild.targets import parse_target

# --- strategies ---------------------------------------------------------------------------------


@st.composite
def param_types(draw: st.DrawFn) -> ParamType:
    """Every type the grammar accepts (the module docstring's rules, written out a second way)."""
    if draw(st.booleans()):
        element = draw(st.sampled_from(ELEMENT_TYPES))
        return ParamType(element, pointer=True, const=draw(st.booleans()), hint=draw(st.sampled_from([None, 16])))
    element = draw(st.sampled_from(SCALAR_TYPES))
    hint = draw(st.sampled_from([None, 16, 1])) if element in INTEGER_TYPES else None
    return ParamType(element, hint=hint)


#: Near misses of the grammar, and what the former grammars let through.
NEAR_MISSES = ["ki32", "kfp16:16", "fp8e5", "fp8e4nv", "*fp8e4b8", "*fp8e5b16", "fp32:16", "fp16:1", "*fp16:1",
               "u1:16", "i1:1", "*i32:8", "i32:", "i32:16:16", "* fp16", "*fp16 :16", "*fp16: 16", "**fp16", "*k",
               "*kk fp16", "*", "", " ", "int32", "*float", "f32", "B", "constexpr", "tensordesc<fp16[16]>", "I32",
               "i32:０", "i32:１６", "*ｆp16", "\x00", "i32\x00"]

# --- the grammar itself -------------------------------------------------------------------------


@given(param_types(), st.sampled_from(["", " ", "  ", "\t"]), st.sampled_from(["", " ", "\n"]))
def test_every_type_round_trips(t: ParamType, before: str, after: str) -> None:
    text = str(t)
    assert parse_type(text) == t
    assert parse_type(before + text + after) == t
    assert str(parse_type(text)) == text


@given(st.sampled_from(NEAR_MISSES) | st.text(max_size=12) | param_types().map(str).map(lambda s: s[:-1]))
def test_any_text_is_a_type_or_one_signature_error(text: str) -> None:
    try:
        t = parse_type(text)
    except SignatureError as exc:
        assert isinstance(exc, ValueError) and "\n" not in str(exc).replace(repr(text), "")
        assert not is_type(text)
        return
    assert str(t) == text.strip() and is_type(text)


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_are_refused(text: str) -> None:
    assert not is_type(text)


def _triton_parses(triton_type: str) -> bool:
    from triton.language import str_to_ty

    try:
        str_to_ty(triton_type, None)
    except (KeyError, IndexError, ValueError):
        return False
    return True


def _triton_launches_scalar(triton_type: str) -> bool:
    from triton.backends.nvidia.driver import ty_to_cpp

    try:
        ty_to_cpp(triton_type)
    except KeyError:
        return False
    return True


ALL_SHAPES = [ParamType(e, pointer=p, const=c, hint=h)
              for e, p, c, h in itertools.product(ELEMENT_TYPES, (False, True), (False, True), (None, 16, 1))]


@pytest.mark.parametrize("t", ALL_SHAPES, ids=str)
def test_accepted_exactly_where_triton_compiles_and_launches_it(t: ParamType) -> None:
    """Triton's parser takes the type; a scalar has a C type in Triton's launcher and in kbuild's; a pointer's
    fp8 element is one the NVIDIA backend supports on some target; hints only where the JIT gives them."""
    from triton.backends.nvidia.compiler import CUDAOptions

    nvidia_fp8 = {*CUDAOptions.supported_fp8_dtypes, "fp8e4nv"}  # fp8e4nv from sm_89 (parse_options)
    triton_ok = _triton_parses(t.triton_type) and (
        (t.pointer and (t.element not in FP8_TYPES or t.element in nvidia_fp8))
        or (not t.pointer and _triton_launches_scalar(t.triton_type) and t.triton_type in C_TYPES))
    integer = not t.pointer and t.element in INTEGER_TYPES
    hint_ok = t.hint is None or (t.hint == 16 and (t.pointer or integer)) or (t.hint == 1 and integer)
    assert is_type(str(t)) == (triton_ok and hint_ok), str(t)
    if is_type(str(t)):
        assert parse_type(str(t)) == t


def test_the_hint_rule_is_the_jit_specialisers() -> None:
    """Triton's JIT gives ':16' and ':1' to integers only, never to floats or bools."""
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import native_specialize_impl

    def spec(value: Any) -> tuple[str, Any]:
        ty, key = native_specialize_impl(BaseBackend, value, False, True, True)[:2]
        return ty, key

    assert spec(32) == ("i32", "D") and spec(2**40) == ("i64", "D") and spec(1) == ("constexpr", 1)
    assert spec(True)[1] is None and spec(16.0)[1] is None and spec(1.0) == ("fp32", None)
    assert spec(True)[0] in BOOLEAN_TYPES and spec(16.0)[0] in FLOAT_TYPES


def test_torch_dtypes_are_the_ones_triton_reads_back() -> None:
    """Each pointer element's torch dtype canonicalises to that element in Triton (bool to u1)."""
    torch = pytest.importorskip("torch")
    from triton._utils import canonicalize_dtype

    for element in ELEMENT_TYPES:
        name = ParamType(element, pointer=True).torch_dtype
        if name is None:
            assert element == "fp8e4b15"  # Triton's own format, no torch dtype
            continue
        assert canonicalize_dtype(getattr(torch, name)) == ("u1" if element == "i1" else element)


# --- the two former call sites, and Triton's AOT compiler, agree --------------------------------

KERNEL_SRC = """
import triton
import triton.language as tl


@triton.jit
def k(p0, p1, p2, p3, p4, BLOCK: tl.constexpr):
    pass


@triton.jit
def strided(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs * stride, mask=m) * 2, mask=m)
"""
PARAMS = ["p0", "p1", "p2", "p3", "p4"]


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("sigk")
    (root / "sigk_kernels.py").write_text(KERNEL_SRC)
    sys.path.insert(0, str(root))
    try:
        import sigk_kernels

        yield root, sigk_kernels
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("sigk_kernels", None)


declarations = st.lists(param_types() | st.integers(2, 512), min_size=len(PARAMS), max_size=len(PARAMS))


def _split(decl: list[ParamType | int]) -> tuple[dict[str, str], dict[str, int]]:
    sig = {n: str(d) for n, d in zip(PARAMS, decl) if isinstance(d, ParamType)}
    consts = {n: d for n, d in zip(PARAMS, decl) if isinstance(d, int)}
    return sig, {**consts, "BLOCK": 64}


def _bench_spec(fn: Any, sig: dict[str, str], consts: dict[str, Any]) -> BenchSpec:
    out = next((n for n, t in sig.items() if t.startswith("*")), None)
    return BenchSpec(name="sig", fn=fn, signature=sig, constexprs=consts, configs=[Config()],
                     make_inputs=lambda seed, device: {}, grid=lambda c: (1, 1, 1),
                     outputs={out: None} if out else {}, flops=0.0, bytes_moved=1.0, archs=(80, 90))


def _project(sig: dict[str, str], consts: dict[str, Any], source: str = "sigk_kernels:k") -> Any:
    table = {"targets": ["sm_90"], "kernels": [{"name": "k", "source": source, "signature": sig,
                                                 "constexprs": consts}]}
    return settings_from_table(table, where="sig/pyproject.toml", project_dir=Path("."), environ={})


def _triton_aot_tool(root: Path, sig: dict[str, str], consts: dict[str, Any]) -> Any:
    """What ``triton/tools/compile.py`` hands ASTSource for the same declaration (stopped right there)."""
    from triton.runtime.jit import JITFunction
    from triton.tools import compile as aot

    class Captured(Exception):
        pass

    def capture(**kwargs: Any) -> None:
        raise Captured(kwargs)

    text = ", ".join(str(consts[n]) if n in consts else sig[n] for n in [*PARAMS, "BLOCK"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "path", list(sys.path))
        mp.setattr(JITFunction, "create_binder", lambda self: setattr(self, "ASTSource", capture), raising=True)
        with pytest.raises(Captured) as got:
            aot.compile_kernel(aot.CompileArgs(path=str(root / "sigk_kernels.py"), kernel_name="k", signature=text,
                                               grid="1,1,1", target="cuda:90:32"))
    return got.value.args[0]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(declarations)
def test_kbuild_compile_bench_specs_and_tritons_aot_tool_build_the_same_ast_source(kernels: Any,
                                                                                    decl: list[Any]) -> None:
    root, mod = kernels
    sig, consts = _split(decl)
    settings_ = _project(sig, consts)
    from_project = triton_aot.ast_source_args(settings_, settings_.kernels[0], mod.k)
    spec = _bench_spec(mod.k, sig, consts)
    from_spec = ast_source(spec, spec.configs[0])
    assert from_spec.signature == from_project["signature"]
    assert from_spec.attrs == from_project["attrs"]
    assert from_spec.constants == {(PARAMS.index(n) if n in PARAMS else 5,): v
                                   for n, v in from_project["constexprs"].items()}
    tool = _triton_aot_tool(root, sig, consts)
    assert tool["signature"] == from_project["signature"]
    assert tool["constexprs"] == from_project["constexprs"]
    assert tool["attrs"] == from_project["attrs"]


def test_a_colon_one_in_a_bench_spec_is_the_constant_one(kernels: Any) -> None:
    """The spec's builder used to drop ':1' (the parameter stayed a runtime i32)."""
    _, mod = kernels
    spec = _bench_spec(mod.k, {"p0": "*fp16:16", "p1": "i32:1", "p2": "i32", "p3": "i64:16", "p4": "fp32"},
                       {"BLOCK": 64})
    src = ast_source(spec, spec.configs[0])
    assert src.signature["p1"] == "constexpr" and src.constants[(1,)] == 1
    assert src.signature["p2"] == "i32" and (2,) not in src.constants
    assert src.attrs == {(0,): [["tt.divisibility", 16]], (3,): [["tt.divisibility", 16]]}


def _cubin_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_both_paths_compile_a_colon_one_declaration_to_the_same_cubin(kernels: Any) -> None:
    """What the tuner measures (a bench spec) is what ``kbuild compile`` ships, ':1' included; and ':1'
    does change the code (so the comparison can fail)."""
    _, mod = kernels
    sig = {"x_ptr": "*fp32:16", "y_ptr": "*fp32:16", "n": "i32", "stride": "i32:1"}
    table = {"targets": ["sm_80"], "kernels": [{"name": "strided", "source": "sigk_kernels:strided", "signature": sig,
                                                 "constexprs": {"BLOCK": 128}}]}
    project = settings_from_table(table, where="sig/pyproject.toml", project_dir=Path("."), environ={})
    shipped = triton_aot.compile_kernel(project, project.kernels[0], parse_target("sm_80"), mod.strided)
    spec = BenchSpec(name="strided", fn=mod.strided, signature=sig, constexprs={"BLOCK": 128},
                     configs=[Config(num_warps=4, num_stages=3)], make_inputs=lambda seed, device: {},
                     grid=lambda c: (1, 1, 1), outputs={"y_ptr": None}, flops=0.0, bytes_moved=1.0, archs=(80,))
    measured = compile_spec(spec, spec.configs[0], 80)
    assert _cubin_sha(measured.asm["cubin"]) == shipped.cubin_sha256
    runtime_stride = dict(spec.signature, stride="i32")
    other = compile_spec(BenchSpec(**{**spec.__dict__, "signature": runtime_stride}), spec.configs[0], 80)
    assert _cubin_sha(other.asm["cubin"]) != shipped.cubin_sha256


#: Types the former config grammar let through and Triton cannot compile or launch as declared.
FORMERLY_ACCEPTED = ["ki32", "kfp16:16", "fp8e5", "fp8e4nv", "fp32:16", "fp16:1", "*fp16:1", "u1:16", "i1:1"]


@pytest.mark.hostile(fault="bad parameter type", outcome="clean error")
@pytest.mark.parametrize("ty", FORMERLY_ACCEPTED)
def test_the_project_declaration_refuses_what_triton_cannot_build(tmp_path: Path, ty: str) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text('[tool.kbuild]\ntargets = ["sm_90"]\n[[tool.kbuild.kernels]]\nname = "add"\n'
                    f'source = "pkg.mod:add"\nsignature = {{ x = "{ty}" }}\n')
    with pytest.raises(ConfigError) as err:
        load_settings(path, environ={})
    assert err.value.exit_code == 2 and err.value.key == "[tool.kbuild.kernels][0].signature.x"
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


@pytest.mark.hostile(fault="bad parameter type", outcome="clean error")
@pytest.mark.parametrize("ty", FORMERLY_ACCEPTED)
def test_a_bench_spec_refuses_what_triton_cannot_build(kernels: Any, ty: str) -> None:
    _, mod = kernels
    spec = _bench_spec(mod.k, {"p0": "*fp16:16", "p1": ty, "p2": "i32", "p3": "i32", "p4": "i32"}, {"BLOCK": 64})
    with pytest.raises(BenchSpecError, match=r"signature\['p1'\]"):
        validate_spec(spec)


def test_the_kbuild_compile_builder_names_the_key_of_a_bad_type(kernels: Any) -> None:
    """A declaration that skipped the settings model (built in code) still gets the key, not a KeyError."""
    _, mod = kernels
    good = _project({"p0": "*fp16", "p1": "i32", "p2": "i32", "p3": "i32", "p4": "i32"}, {"BLOCK": 64})
    kernel = good.kernels[0]
    bad = type(kernel)(**{**kernel.__dict__, "signature": {**kernel.signature, "p2": "ki32"}})
    with pytest.raises(KernelSourceError) as err:
        triton_aot.ast_source_args(good, bad, mod.k)
    assert err.value.key == "[tool.kbuild.kernels][0].signature.p2" and "'k'" in str(err.value)


def test_the_builder_names_the_first_bad_parameter() -> None:
    names = ["a", "b", "c"]
    with pytest.raises(SignatureError) as err:
        ast_source_args(names, {"a": "*fp16", "c": "i32"}, {})
    assert err.value.param == "b" and "not declared" in str(err.value)
    with pytest.raises(SignatureError) as err:
        ast_source_args(names, {"a": "*fp16", "b": "i32", "c": "i32"}, {"b": 3})
    assert err.value.param == "b" and "both" in str(err.value)
    with pytest.raises(SignatureError) as err:
        ast_source_args(names, {"a": "*fp16", "b": "i32", "c": "i32", "d": "i32"}, {})
    assert err.value.param == "d"
    with pytest.raises(SignatureError) as err:
        ast_source_args(names, {"a": "*fp16", "b": "fp32:16", "c": "i32"}, {})
    assert err.value.param == "b" and "fp32:16" in str(err.value)


def test_a_recorded_string_none_is_the_kernels_own_value() -> None:
    """Liger's cross-entropy takes ``reduction="none"`` as a constexpr: recorded from a call, the string is the
    value the kernel gets (a recorded None is JSON null); hand-written, it is still refused as a likely typo for
    None."""
    from kbuild.declarations.signature import SignatureError, check_constexpr_value

    check_constexpr_value("none", recorded=True)
    with pytest.raises(SignatureError, match="would reach the kernel as a string"):
        check_constexpr_value("none")
