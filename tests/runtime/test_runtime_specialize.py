"""kbuild.runtime.specialize against the installed Triton's own ``native_specialize_impl`` (CPU).

The direct path launches a shipped cubin only when the call's specialisation equals the one it was compiled for;
a wrong "D" (divisible by 16) on an unaligned pointer would launch code that assumes alignment. So every rule of
``specialize`` is checked here against Triton's native function on generated arguments and flags, and the binder
against Triton's binder on whole calls.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kbuild.runtime import specialize as spec

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def backend() -> Any:
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    return make_backend(GPUTarget("cuda", 90, 32))


def native(backend: Any, arg: Any, is_const: bool, spec_value: bool, align: bool) -> Any:
    from triton._C.libtriton import native_specialize_impl

    try:
        return tuple(native_specialize_impl(backend, arg, is_const, spec_value, align))
    except Exception as exc:  # the same exception type is the expected answer
        return type(exc)


def ours(backend: Any, arg: Any, is_const: bool, spec_value: bool, align: bool) -> Any:
    try:
        return tuple(spec.specialize(backend, arg, is_const, spec_value, align))
    except Exception as exc:
        return type(exc)


def test_the_installed_triton_is_one_whose_rules_were_checked() -> None:
    # If this fails, Triton changed: re-run this file against it before adding its version to CHECKED_TRITON.
    assert spec.checked()


EDGES = [0, 1, -1, 15, 16, 17, -16, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**31 + 16, 2**63 - 1, 2**63,
         2**63 + 16, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64 - 16, 2**64, -(2**64)]
FLAGS = st.tuples(st.booleans(), st.booleans(), st.booleans())


@settings(max_examples=400, deadline=None)
@given(value=st.sampled_from(EDGES) | st.integers(-(2**65), 2**65) | st.integers(-64, 64).map(lambda v: v * 16),
       flags=FLAGS)
def test_integers(backend: Any, value: int, flags: tuple[bool, bool, bool]) -> None:
    assert ours(backend, value, *flags) == native(backend, value, *flags)


@settings(max_examples=100, deadline=None)
@given(value=st.booleans() | st.floats(allow_nan=True) | st.none(), flags=FLAGS)
def test_bools_floats_and_none(backend: Any, value: Any, flags: tuple[bool, bool, bool]) -> None:
    assert ours(backend, value, *flags) == native(backend, value, *flags)


DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int16,
          torch.int32, torch.int64, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz,
          torch.float8_e5m2fnuz, torch.uint16, torch.uint32, torch.uint64,
          torch.complex64]  # complex: Triton has no name for it, both raise the same KeyError


class Traced(torch.Tensor):
    """A tensor subclass with its own ``__torch_function__`` (as tensor wrappers have)."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return super().__torch_function__(func, types, args, kwargs or {})


@settings(max_examples=300, deadline=None)
@given(dtype=st.sampled_from(DTYPES), offset=st.integers(0, 40), wrap=st.sampled_from(["tensor", "parameter", "subclass"]),
       flags=FLAGS)
def test_tensors_and_subclasses_at_any_offset(backend: Any, dtype: torch.dtype, offset: int, wrap: str,
                                              flags: tuple[bool, bool, bool]) -> None:
    base = torch.zeros(64, dtype=dtype)
    arg: Any = base[offset:]  # data_ptr moves by offset * itemsize: aligned to 16 or not
    if wrap == "parameter":
        arg = torch.nn.Parameter(arg, requires_grad=False)
    elif wrap == "subclass":
        arg = arg.as_subclass(Traced)
    assert type(arg).__name__ == {"tensor": "Tensor", "parameter": "Parameter", "subclass": "Traced"}[wrap]
    assert ours(backend, arg, *flags) == native(backend, arg, *flags)


class _NoNativeTensors:
    """A backend that specialises tensors itself (as AMD's does): both sides must ask it."""

    supports_native_tensor_specialization = False

    @staticmethod
    def get_tensor_specialization(arg: Any, **kwargs: Any) -> Any:
        return ("asked", kwargs["align"], arg.data_ptr() % 16)


@settings(max_examples=60, deadline=None)
@given(offset=st.integers(0, 20), flags=FLAGS)
def test_a_backend_without_native_tensor_specialisation_is_triton_s_answer(offset: int,
                                                                          flags: tuple[bool, bool, bool]) -> None:
    arg = torch.zeros(32, dtype=torch.float16)[offset:]
    assert ours(_NoNativeTensors, arg, *flags) == native(_NoNativeTensors, arg, *flags)
    assert ours(_NoNativeTensors, 16, *flags) == native(_NoNativeTensors, 16, *flags)  # ints do not ask it


def test_other_types_are_triton_s_answer(backend: Any) -> None:
    import enum

    import triton.language as tl

    class Flag(enum.IntEnum):
        ON = 16

    class Pointer:
        dtype = torch.float16

        def __init__(self, ptr: Any = 4096) -> None:
            self.ptr = ptr

        def data_ptr(self) -> Any:
            return self.ptr

    class OddPointer(torch.Tensor):  # a tensor whose data_ptr Triton cannot read as a u64
        ptr: Any = None

        def data_ptr(self) -> Any:
            return self.ptr

    odd = [torch.zeros(4).as_subclass(OddPointer) for _ in range(3)]
    for tensor, ptr in zip(odd, [-16, 2**64, 16.0]):
        tensor.ptr = ptr
    others = [Flag.ON, (1, 2.0, None), (), tl.constexpr(8), Pointer(), Pointer(4100), Pointer(-16), "text", object(),
              2.5e300, *odd]
    for arg in others:
        for flags in [(False, True, True), (True, False, False), (True, True, True)]:
            assert ours(backend, arg, *flags) == native(backend, arg, *flags), arg


def test_binder_matches_triton_s_binder_on_whole_calls(backend: Any) -> None:
    import triton
    import triton.language as tl
    from triton.runtime.jit import create_function_from_signature

    @triton.jit(do_not_specialize=["n"], do_not_specialize_on_alignment=["m"])
    def kernel(x_ptr, y_ptr, n, m, k: tl.int64, eps: tl.float32, flag: tl.int1, scale=1.0,
               opt_ptr=None, BLOCK: tl.constexpr = 64):
        pass

    theirs = create_function_from_signature(kernel.signature, kernel.params, backend)

    def mine() -> Any:  # a binder whose first call is kbuild's (what the run time's first calls get)
        bind = create_function_from_signature(kernel.signature, kernel.params, backend)
        assert spec.first_call_specialises(bind) and not spec.first_call_specialises(bind)  # once
        assert bind.__globals__["specialize_impl"].kbuild_first_call
        return bind

    assert not getattr(theirs.__globals__["specialize_impl"], "kbuild_first_call", False)  # Triton's is untouched
    x = torch.zeros(100, dtype=torch.float32)
    y = torch.zeros(100, dtype=torch.float16)
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((x, y, 32, 32, 32, 1e-5, True), {}),
        ((x[1:], y[3:], 1, 1, 1, 0.5, False), {"scale": 2.0, "BLOCK": 128}),
        ((x[4:], y[8:], 2**40, 17, -16, 0.0, True), {"opt_ptr": x, "num_warps": 8}),
        ((x, y, 7, 48, 2**31, 1.0, False), {"opt_ptr": x[2:], "debug": False, "instrumentation_mode": ""}),
    ]
    for args, kwargs in calls:
        assert mine()(*args, **kwargs) == theirs(*args, **kwargs)


def test_an_unchecked_triton_keeps_triton_s_binder(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import triton

    @triton.jit
    def kernel(x_ptr, n):
        pass

    import triton.runtime.jit as triton_jit

    monkeypatch.setattr(triton, "__version__", "9.9.9")
    assert not spec.checked()
    original = triton_jit.create_function_from_signature
    assert not spec.install_first_call_binders() and triton_jit.create_function_from_signature is original


def _probe(data_dir: Path, mode: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(HERE / "direct_first_call_probe.py"), str(data_dir),
                           "--specialize", mode], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_first_direct_call_in_a_fresh_process_does_not_import_gluon(jit_settings: Any, tuned_builds: list[Any],
                                                                       tmp_path: Path) -> None:
    """CPU stand-ins for libcuda and torch's CUDA queries (labelled). With Triton's specialiser the same call
    imports Gluon: the test would fail if the direct path went back to it, or if something else imported Gluon."""
    from kbuild.build.package_data import write_package_data

    shipped = write_package_data(jit_settings, tuned_builds, tmp_path / "kbx_jit")
    fast = _probe(shipped.data_dir, "kbuild")
    assert (fast["modules_loaded"], fast["launches"]) == (1, 2)
    assert fast["stages"] == ["zero-jit", "direct-launch"]
    assert not fast["gluon_imported_before"] and not fast["gluon_imported_after"]
    assert fast["imported_by_first_call"] == []  # enable() imported what the first call needs
    slow = _probe(shipped.data_dir, "triton")
    assert (slow["modules_loaded"], slow["launches"]) == (1, 2)
    assert slow["gluon_imported_after"]


def test_binders_made_after_install_specialise_their_first_call_only(backend: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The first call of every kernel (not only the process's first) binds with kbuild's specialiser; the binder's
    global is Triton's own again from its second call, so later calls cost what Triton's do."""
    import triton
    import triton.language as tl
    import triton.runtime.jit as triton_jit

    @triton.jit(do_not_specialize=["n"])
    def kernel(x_ptr, y_ptr, n, m, eps: tl.float32, BLOCK: tl.constexpr = 64):
        pass

    @triton.jit
    def constexprs_only(BLOCK: tl.constexpr, FLAG: tl.constexpr):
        pass

    original = triton_jit.create_function_from_signature
    seen: list[Any] = []
    real = spec.specialize

    def recording_specialize(*a: Any) -> Any:
        seen.append(a[1])
        return real(*a)

    monkeypatch.setattr(spec, "specialize", recording_specialize)
    assert spec.install_first_call_binders() and not spec.install_first_call_binders()  # idempotent
    try:
        bind = triton_jit.create_function_from_signature(kernel.signature, kernel.params, backend)
        theirs = original(kernel.signature, kernel.params, backend)
        native_impl = theirs.__globals__["specialize_impl"]
        assert bind.__globals__["specialize_impl"] is not native_impl
        x, y = torch.zeros(64, dtype=torch.float32), torch.zeros(64, dtype=torch.float16)
        assert bind(x, y, 5, 32, 1.0) == theirs(x, y, 5, 32, 1.0)
        assert len(seen) == 4  # x_ptr, y_ptr, n, m: eps (fp32) is not specialised, BLOCK is a constexpr
        assert bind.__globals__["specialize_impl"] is native_impl  # nothing of kbuild's on later calls
        x1, y3 = x[1:], y[3:]
        assert bind(x1, y3, 7, 33, 2.0, BLOCK=128) == theirs(x1, y3, 7, 33, 2.0, BLOCK=128)
        assert len(seen) == 4
        plain = triton_jit.create_function_from_signature(constexprs_only.signature, constexprs_only.params, backend)
        assert not spec.first_call_specialises(plain) and plain(16, True) == ({"BLOCK": 16, "FLAG": True},
                                                                              [("constexpr", 16), ("constexpr", True)],
                                                                              {})
        # the process's first call (direct.first_call) takes the device's binder as it is: not wrapped twice
        again = triton_jit.create_function_from_signature(kernel.signature, kernel.params, backend)
        assert not spec.first_call_specialises(again)
    finally:
        spec.uninstall_first_call_binders()
    assert triton_jit.create_function_from_signature is original


def test_a_second_kernel_s_first_call_imports_no_gluon(tmp_path: Path) -> None:
    """In a fresh process: with the first-call binders installed, the first calls of two kernels' binders import no
    Gluon; the second call of one (Triton's own specialiser) does, once. Without them the first call does."""
    code = r"""
import json, sys, torch, triton
import triton.runtime.jit as triton_jit
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import make_backend
from kbuild.runtime import specialize
install = sys.argv[1] == "install"
if install:
    assert specialize.install_first_call_binders()
backend = make_backend(GPUTarget("cuda", 90, 32))

@triton.jit
def first(x_ptr, n):
    pass

@triton.jit
def second(x_ptr, y_ptr, n):
    pass

gluon = lambda: any(m.startswith("triton.experimental.gluon") for m in sys.modules)
x = torch.zeros(16)
b1 = triton_jit.create_function_from_signature(first.signature, first.params, backend)
b1(x, 16)
b2 = triton_jit.create_function_from_signature(second.signature, second.params, backend)
b2(x, x, 16)
after_first_calls = gluon()
b2(x, x, 17)
print(json.dumps({"after_first_calls": after_first_calls, "after_a_second_call": gluon()}))
"""
    script = tmp_path / "two_kernels.py"  # @triton.jit needs its function in a file
    script.write_text(code)
    got = {}
    for mode in ("install", "plain"):
        done = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=300,
                              check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        got[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["install"] == {"after_first_calls": False, "after_a_second_call": True}
    assert got["plain"]["after_first_calls"] is True


#: Parameter kinds of a generated kernel: (declaration in the source, an argument to pass).
KINDS = {
    "ptr": ("{n}", lambda: torch.zeros(8)),
    "ptr_half": ("{n}", lambda: torch.zeros(8, dtype=torch.float16)[1:]),
    "int": ("{n}", lambda: 48),
    "one": ("{n}", lambda: 1),
    "int32": ("{n}: tl.int32", lambda: 7),
    "int64": ("{n}: tl.int64", lambda: 2**40),
    "fp32": ("{n}: tl.float32", lambda: 0.5),
    "flag": ("{n}: tl.int1", lambda: True),
    "float": ("{n}", lambda: 2.5),
    "none": ("{n}", lambda: None),
    "constexpr": ("{n}: tl.constexpr", lambda: 64),
}


@settings(max_examples=40, deadline=None)
@given(kinds=st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=9),
       dns=st.lists(st.booleans(), min_size=9, max_size=9), dnsa=st.lists(st.booleans(), min_size=9, max_size=9))
def test_a_first_call_binder_is_triton_s_after_exactly_one_call(backend: Any, tmp_path_factory: Any,
                                                                 kinds: list[str], dns: list[bool],
                                                                 dnsa: list[bool]) -> None:
    """Any mix of parameters (annotated or not, do_not_specialize, on alignment, constexprs): the first call's
    answer is Triton's binder's, and after exactly one call the binder's global is Triton's own function again (the
    count of its specialising sites, read from the binder's code, matches the calls the first call makes)."""
    import importlib.util

    import triton.runtime.jit as triton_jit

    names = [f"p{i}" for i in range(len(kinds))]
    plain = [n for n, k in zip(names, kinds) if k != "constexpr"]
    no_spec = [n for n, d in zip(names, dns) if d and n in plain]
    no_align = [n for n, d in zip(names, dnsa) if d and n in plain]
    params = ", ".join(KINDS[k][0].format(n=n) for n, k in zip(names, kinds))
    source = ("import triton\nimport triton.language as tl\n\n\n"
              f"@triton.jit(do_not_specialize={no_spec!r}, do_not_specialize_on_alignment={no_align!r})\n"
              f"def kernel({params}):\n    pass\n")
    path = tmp_path_factory.mktemp("gen") / "generated_kernel.py"
    path.write_text(source)
    loader = importlib.util.spec_from_file_location(f"generated_kernel_{abs(hash(source))}", path)
    assert loader is not None and loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    kernel = module.kernel
    args = [KINDS[k][1]() for k in kinds]
    original = getattr(triton_jit.create_function_from_signature, "kbuild_original",
                       triton_jit.create_function_from_signature)
    theirs = original(kernel.signature, kernel.params, backend)
    mine = original(kernel.signature, kernel.params, backend)
    native_impl = mine.__globals__["specialize_impl"]
    # the parameters Triton's binder calls specialize_impl for: all but constexprs and fp/bool annotations
    specialised = [k for k in kinds if (k != "constexpr" and KINDS[k][0] == "{n}") or k in ("int32", "int64")]
    assert spec.first_call_specialises(mine) == bool(specialised)
    assert (mine.__globals__["specialize_impl"] is not native_impl) == bool(specialised)
    assert mine(*args) == theirs(*args)
    assert mine.__globals__["specialize_impl"] is native_impl  # after exactly one call
