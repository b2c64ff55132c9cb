"""Argument specialisation for the direct path without Triton's first-call import of Gluon.

Why: Triton 3.6 specialises every launch argument in C++ (``native_specialize_impl``, ``python/src/specialize.cc``).
On its first call that function imports ``triton.experimental.gluon.nvidia.hopper`` (to recognise Gluon tensor
descriptors), which pulls in about 46 modules of Gluon. On the H200 that import was most of a shipped kernel's
first call through :mod:`kbuild.runtime.direct` (0.11-0.12 s of 0.11-0.15 s, the device's Triton having no
bytecode cache; ``benchmarks/results/h200/issue16``). On the CPU machine with stand-ins for the driver
(``benchmarks/results/runtime_first_call_cpu.json``, 2 shared cores; the run time's modules imported by
:func:`kbuild.runtime.enable`) the host side of the first call takes 5.8 ms with this module against 70.8 ms with
Triton's specialiser, whose import then happens at the second call (70 ms) — Triton's own cost, once per process;
later calls 13.6 µs against 13.8 µs, bytecode cached.

How: Triton's own binder (``create_function_from_signature``: parameter binding, defaults, constexprs,
``do_not_specialize``, annotations, options all stay Triton's) gets, for its first call only, :func:`specialize` in
place of the one name it calls to specialise, ``specialize_impl`` (:func:`first_call_specialises`; every binder
Triton makes once the run time is enabled: :func:`install_first_call_binders`). That function answers the argument
types whose rules are
short and fixed, exactly as ``specialize.cc`` does: exact ``int``, ``bool`` and ``float``, ``None``, and ``torch.Tensor``
or a subclass such as ``nn.Parameter`` (Triton's C++ reaches a subclass through its ``data_ptr`` fallback and applies
the same tensor rule):

- ``int``: ``("constexpr", 1)`` for the value 1 when specialised; else ``i32``/``i64``/``u64`` by range, with the key
  ``"D"`` (divisible by 16, alignment on) or ``""``, or None when not specialised; out of the u64 range it defers.
- ``bool``: ``("u1", None)``; ``float``: ``("fp32", None)``; ``None``: ``("constexpr", None)``.
- ``torch.Tensor``: ``(canonicalize_ptr_dtype(dtype, is_const), key)``, the key from ``data_ptr() % 16`` as above
  (None when not specialised); a ``data_ptr()`` that is not an int in the u64 range, or a backend without native
  tensor specialisation (AMD's, which asks ``get_tensor_specialization``), defers.

Everything else (``int`` and ``float`` subclasses, tuples, tensor descriptors, constexpr objects, JIT functions, objects with a
``data_ptr``) goes to Triton's ``native_specialize_impl`` unchanged, and so does every argument under a Triton
version whose rules were not checked (:data:`CHECKED_TRITON`). The equivalence is a CPU test
(``tests/runtime/test_runtime_specialize.py``): for each rule, generated arguments and flags give the same pair as
the installed Triton's native function.
"""

from __future__ import annotations

from typing import Any

CHECKED_TRITON = ("3.6.0",)
"""Triton versions whose ``native_specialize_impl`` this module's rules were tested against."""

_I32 = (-(2**31), 2**31 - 1)
_I64 = (-(2**63), 2**63 - 1)
_U64_MAX = 2**64 - 1


def _native() -> Any:
    from triton._C.libtriton import native_specialize_impl

    return native_specialize_impl


def _int_key(value: int, specialize: bool, align: bool) -> str | None:
    if not specialize:
        return None
    return "D" if align and value % 16 == 0 else ""


def specialize(backend: Any, arg: Any, is_const: bool, specialize_value: bool, align: bool) -> tuple[Any, Any]:
    """``native_specialize_impl(backend, arg, is_const, specialize_value, align)`` for the common exact types,
    without its first-call imports; anything else is Triton's own function's answer."""
    kind = type(arg)
    if kind is int:
        if specialize_value and arg == 1:
            return ("constexpr", arg)
        if _I32[0] <= arg <= _I32[1]:
            return ("i32", _int_key(arg, specialize_value, align))
        if _I64[0] <= arg <= _I64[1]:
            return ("i64", _int_key(arg, specialize_value, align))
        if 0 <= arg <= _U64_MAX:
            return ("u64", _int_key(arg, specialize_value, align))
    elif kind is bool:
        return ("u1", None)
    elif kind is float:
        return ("fp32", None)
    elif arg is None:
        return ("constexpr", None)
    elif _is_tensor(arg) and getattr(backend, "supports_native_tensor_specialization", False):
        from triton._utils import canonicalize_ptr_dtype

        ty = canonicalize_ptr_dtype(arg.dtype, bool(is_const))
        if not specialize_value:
            return (ty, None)
        ptr = arg.data_ptr()
        if type(ptr) is int and 0 <= ptr <= _U64_MAX:  # else Triton raises (PyLong_AsUnsignedLongLong)
            return (ty, "D" if align and ptr % 16 == 0 else "")
    return _native()(backend, arg, is_const, specialize_value, align)


def _is_tensor(arg: Any) -> bool:
    """A ``torch.Tensor`` or subclass (an ``nn.Parameter``): Triton's C++ handles subclasses through its
    ``data_ptr`` fallback with the same tensor rule."""
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(arg, torch.Tensor)


def checked() -> bool:
    """Whether the installed Triton is one whose specialisation rules :func:`specialize` reproduces."""
    import triton

    return str(triton.__version__) in CHECKED_TRITON


def first_call_specialises(bind: Any) -> bool:
    """Make ``bind`` (a binder Triton made: ``create_function_from_signature``) specialise its first call through
    :func:`specialize` and every later one through Triton's own function again, with nothing added to a later
    call: the binder's one global ``specialize_impl`` is put back once the first call has specialised each of its
    arguments (counted from the binder's code: one load of the name per argument Triton specialises). Both answer
    alike (the CPU test of this module), so a call that stops half-way, or two threads in a first call at once,
    only change which of the two answers. False, and ``bind`` untouched, when it has no such global."""
    import dis

    namespace = bind.__globals__
    native = namespace.get("specialize_impl")
    sites = sum(1 for ins in dis.get_instructions(bind) if ins.opname == "LOAD_GLOBAL"
                and ins.argval == "specialize_impl")
    if native is None or native is specialize or getattr(native, "kbuild_first_call", False) or sites == 0:
        return False
    left = [sites]

    def first(backend: Any, arg: Any, is_const: bool, specialize_value: bool, align: bool) -> tuple[Any, Any]:
        left[0] -= 1
        if left[0] <= 0:
            namespace["specialize_impl"] = native
        return specialize(backend, arg, is_const, specialize_value, align)

    first.kbuild_first_call = True  # type: ignore[attr-defined]
    namespace["specialize_impl"] = first
    return True


def install_first_call_binders() -> bool:
    """From now on, every binder Triton makes (a kernel's first call on a device: ``JITFunction.create_binder``
    calls the module's ``create_function_from_signature``) specialises that first call without Triton's first-call
    import of Gluon (:func:`first_call_specialises`); later calls are Triton's own, at Triton's cost. So the first
    call of a *second* shipped kernel in a process imports no Gluon either; the import happens once, at the first
    call Triton's own specialiser makes (a kernel's second call). False where the installed Triton was not
    checked (:data:`CHECKED_TRITON`). Idempotent."""
    import triton.runtime.jit as triton_jit

    current = triton_jit.create_function_from_signature
    if not checked() or hasattr(current, "kbuild_original"):
        return False

    def create_function_from_signature(sig: Any, kparams: Any, backend: Any) -> Any:
        bind = current(sig, kparams, backend)
        first_call_specialises(bind)
        return bind

    create_function_from_signature.kbuild_original = current  # type: ignore[attr-defined]
    triton_jit.create_function_from_signature = create_function_from_signature
    return True


def uninstall_first_call_binders() -> None:
    """Triton's ``create_function_from_signature`` back (binders made meanwhile keep their first-call swap)."""
    import triton.runtime.jit as triton_jit

    original = getattr(triton_jit.create_function_from_signature, "kbuild_original", None)
    if original is not None:
        triton_jit.create_function_from_signature = original


__all__ = ["CHECKED_TRITON", "checked", "first_call_specialises", "install_first_call_binders",
           "specialize", "uninstall_first_call_binders"]
