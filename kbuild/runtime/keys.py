"""The run-time side of the key: what Triton's JIT specialised a call to, in kbuild's declaration terms.

At build time :mod:`kbuild.build.resolve` keys a kernel from its ``[tool.kbuild.kernels]``
declaration (:func:`kbuild.key.kernel_key`). At run time Triton 3.6 describes the same facts in
its own terms, as handed to ``knobs.runtime.jit_post_compile_hook``:

* ``signature``: ``{param: "*fp16" | "i32" | "i64" | "fp32" | "u1" | "constexpr"}``. A pointer is
  typed by the tensor's dtype, an integer by its value range (``i64`` beyond 2**31-1);
* ``configs[0]``: the attributes, ``{(index,): [["tt.divisibility", 16]]}`` for a pointer whose
  address, or an integer whose value, is divisible by 16 (``[]`` when it is not);
* ``constants``: ``{(index,): value}`` for ``tl.constexpr`` parameters, and for integer parameters
  whose value is 1, which Triton specialises to the constant 1;
* ``specialization_data``: JSON holding the parsed backend options (``num_warps``, ``num_stages``,
  ``arch``, ...), the same dataclass that :func:`kbuild.compile.triton_aot.compiler_options` makes.

:func:`specialization_from_hook` maps these onto the declaration notation: ``"*fp16:16"`` for a
divisible pointer, ``"i32"`` for an integer that is not, a constexpr value by name, and ``":1"``
for an integer Triton made the constant 1. Triton keeps no type for that constant, and the build
compiles every ``"T:1"`` declaration to the same code, so the type is taken from the declaration
the call is compared with (:meth:`CallSpecialization.key`). An argument passed ``None`` (Triton's
constant None) is ``"none"``, a dtype constexpr (``tl.float16``) is ``{"dtype": "fp16"}``, as the
declaration writes them. Anything else the declaration format cannot express (tuple arguments, other
constants, other attributes) makes the call unsupported: it is never substituted.

A kernel of an installed distribution (Liger-Kernel's, say) has the distribution's name and version
in its build key; :func:`installed_distribution` gives the run time the same component when the
installed version is the one the entry was built from (else the keys differ and Triton compiles).
:func:`current_triton_version` and :func:`current_cc` (the GPU's compute capability) are the key's facts about
this process.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kbuild.declarations.kernel import KernelSettings
from kbuild.distributions import installed_version
from kbuild.key import KernelKey, compiler_component, kernel_key
from kbuild.targets import Target

#: Constexpr values the declaration format can express (exact types: no numpy scalars, no dtypes).
_CONSTEXPR_TYPES = (bool, int, float, str)


def current_triton_version() -> str:
    import triton

    return str(triton.__version__)


def current_cc(device: int | None = None) -> int:
    """The compute capability of ``device`` (default: the current torch device), as Triton's
    ``get_current_target`` computes it, without constructing Triton's driver (which builds ``cuda_utils`` with the
    host compiler) once torch has initialised CUDA; before that, Triton's driver answers."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        major, minor = torch.cuda.get_device_capability(torch.cuda.current_device() if device is None else device)
        return int(major * 10 + minor)
    from triton.runtime.driver import driver

    return int(driver.active.get_current_target().arch)


@dataclass(frozen=True)
class CallSpecialization:
    """One compiled specialisation of a ``@triton.jit`` function, in kbuild's terms."""

    function: str
    """``module:qualname`` of the Python function."""
    name: str
    """``fn.__name__``: the ``function`` component of the key (the declaration's ``source`` attribute)."""
    source_hash: str
    """Triton's ``JITFunction.cache_key`` (the source of the function and everything it calls) and the module
    attributes they read (:func:`kbuild.compile.triton_aot.source_hash`)."""
    signature: dict[str, str]
    """Declaration notation; a parameter Triton specialised to the constant 1 holds ``":1"``."""
    constexprs: dict[str, Any]
    options: dict[str, Any]
    """Triton's parsed backend options, install paths reduced to file names."""
    cc: int
    triton_version: str
    unsupported: str | None = None
    """Why this call cannot be expressed as a declaration (then it is never substituted)."""
    ones: tuple[str, ...] = field(default=())

    @property
    def target(self) -> Target:
        return Target(self.cc)

    def ones_as(self, declared: Mapping[str, str] | None = None) -> tuple[str, ...]:
        """The types of the arguments this call passes as 1 (:attr:`ones`, in order), as ``declared`` types them
        (``"i32:1"`` where it does not type one ``":1"``): all a declaration changes of this call's key."""
        out = []
        for name in self.ones:
            want = "".join((declared or {}).get(name, "").split())
            out.append(want if want.endswith(":1") else "i32:1")
        return tuple(out)

    def declaration(self, declared: Mapping[str, str] | None = None) -> dict[str, str]:
        """The signature, with each ``":1"`` typed as ``declared`` types it (:meth:`ones_as`)."""
        return {**self.signature, **dict(zip(self.ones, self.ones_as(declared), strict=True))}

    def key(self, *, ptxas_version: str, declared: Mapping[str, str] | None = None,
            distribution: Mapping[str, str] | None = None) -> KernelKey:
        """The baseline key the build gives the declaration this call corresponds to.

        ``ptxas_version`` is the build toolchain's (recorded in the index): the run time never runs
        ptxas on the shipped cubin, so the version only has to name the one the cubin came from.
        ``distribution``: the installed distribution the function comes from, as the build keyed it
        (:func:`installed_distribution`); None for a kernel of the project itself."""
        spec = KernelSettings(name=self.name, source=f"{self.function.partition(':')[0]}:{self.name}",
                              signature=self.declaration(declared), constexprs=dict(self.constexprs),
                              num_warps=int(self.options.get("num_warps", 4)),
                              num_stages=int(self.options.get("num_stages", 3)))
        compiler = compiler_component(triton_version=self.triton_version, ptxas_version=ptxas_version,
                                      options=self.options)
        return kernel_key(spec=spec, target=self.target, source_hash=self.source_hash, function=self.name,
                          compiler=compiler, tuner=None,
                          distribution=dict(distribution) if distribution is not None else None)


def installed_distribution(entry: Mapping[str, Any]) -> dict[str, str] | None:
    """The ``distribution`` key component of an index entry (``key_components.kernel.distribution``) when that
    distribution is installed at the version the entry was built from; None otherwise (no component: a kernel of
    the project, or another version installed, whose call then keys differently and is not substituted)."""
    recorded = ((entry.get("key_components") or {}).get("kernel") or {}).get("distribution")
    if not isinstance(recorded, Mapping):
        return None
    installed = installed_version(str(recorded.get("name")))
    if installed is None or installed != recorded.get("version"):
        return None
    return {"name": str(recorded["name"]), "version": installed}


def _is_dtype(value: Any) -> bool:
    import triton.language as tl

    return isinstance(value, tl.dtype) and not isinstance(value, tl.pointer_type)


def _divisibility(attrs: Any) -> tuple[str, str | None]:
    """``(":16" | "", problem)`` from Triton's attribute list of one parameter."""
    if not attrs:
        return "", None
    hint, problem = "", None
    for item in attrs:
        if list(item) == ["tt.divisibility", 16]:
            hint = ":16"
        else:
            problem = f"attribute {item!r} has no declaration notation"
    return hint, problem


def specialization_from_hook(jit: Any, compile_info: Mapping[str, Any], *, cc: int,
                             triton_version: str | None = None) -> CallSpecialization:
    """Map the ``compile`` argument of Triton's ``jit_cache_hook`` / ``jit_post_compile_hook`` onto the
    declaration notation."""
    configs = compile_info.get("configs") or [{}]
    return _specialization(jit, compile_info["signature"], compile_info.get("constants") or {},
                           configs[0] if configs else {}, json.loads(compile_info["specialization_data"])["options"],
                           cc=cc, triton_version=triton_version)


def specialization_from_source(jit: Any, src: Any, options: Mapping[str, Any], *, cc: int,
                               triton_version: str | None = None) -> CallSpecialization:
    """The same from what ``JITFunction._do_compile`` hands ``triton.compile``: the ``ASTSource`` (signature,
    constants keyed by ``(index,)``, attributes) and ``options.__dict__``. The options go through JSON as
    ``serialize_specialization_data`` sends them to the hooks, so both views give the same key."""
    return _specialization(jit, src.signature, src.constants or {}, src.attrs or {},
                           json.loads(json.dumps(dict(options))), cc=cc, triton_version=triton_version)


def _specialization(jit: Any, signature_in: Mapping[str, Any], constants: Mapping[Any, Any],
                    attrs: Mapping[Any, Any], options: dict[str, Any], *, cc: int,
                    triton_version: str | None) -> CallSpecialization:
    # Imported at the first call's lookup, not when a package enables kbuild.runtime (it loads the compile path).
    from kbuild.compile.triton_aot import declared_value, portable_options, source_hash

    params = list(jit.params)
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    ones: list[str] = []
    problem: str | None = None
    for i, param in enumerate(params):
        name = param.name
        ty = signature_in.get(name)
        if not isinstance(ty, str):
            problem = problem or f"parameter {name!r} has type {ty!r} (tuples are not declarable)"
            continue
        if ty == "constexpr":
            if (i,) not in constants:
                problem = problem or f"constexpr {name!r} has no value"
                continue
            value = constants[(i,)]
            if param.is_constexpr:
                if _is_dtype(value):  # a dtype constexpr, declared as { dtype = "fp16" }
                    try:
                        constexprs[name] = declared_value(value)
                    except ValueError as exc:
                        problem = problem or f"constexpr {name!r} = {value!r}: {exc}"
                    continue
                if type(value) not in _CONSTEXPR_TYPES:
                    problem = problem or f"constexpr {name!r} = {value!r} is not a bool, int, float or str"
                    continue
                constexprs[name] = value
            elif value is None:  # an argument passed None: Triton's constant None, declared "none"
                signature[name] = "none"
            elif value == 1 and type(value) is int:
                signature[name] = ":1"
                ones.append(name)
            else:
                problem = problem or f"parameter {name!r} was specialised to the constant {value!r}"
            continue
        hint, bad = _divisibility(attrs.get((i,)))
        if bad:
            problem = problem or f"parameter {name!r}: {bad}"
        signature[name] = ty + hint
    return CallSpecialization(
        function=f"{jit.fn.__module__}:{jit.fn.__qualname__}", name=jit.fn.__name__,
        source_hash=source_hash(jit), signature=signature, constexprs=constexprs,
        options=portable_options(options), cc=int(cc),
        triton_version=triton_version if triton_version is not None else current_triton_version(),
        unsupported=problem, ones=tuple(ones))


def specialization_for_call(jit: Any, *args: Any, cc: int, **kwargs: Any) -> CallSpecialization:
    """What Triton's JIT makes of ``jit[grid](*args, **kwargs)`` on a device of compute capability ``cc``.

    Runs Triton's own code path without a GPU: the binder that ``JITFunction.run`` uses
    (``create_function_from_signature``), ``JITFunction._pack_args``, and ``JITFunction._call_hook``
    to build the exact ``compile`` mapping the post-compile hook receives. Pointers may be CPU
    tensors or any object with ``data_ptr()`` and ``dtype``. For tests, diagnostics and
    ``kbuild package-data``'s examples; the run-time hook gets the mapping from Triton itself."""
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(GPUTarget("cuda", cc, 32))
    kwargs = dict(kwargs)
    kwargs["debug"] = kwargs.get("debug", jit.debug) or knobs.runtime.debug  # as JITFunction.run does
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    binder = create_function_from_signature(jit.signature, jit.params, backend)
    bound_args, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound_args, specialization, options)
    captured: dict[str, Any] = {}

    def capture(**hook_kwargs: Any) -> None:
        captured.update(hook_kwargs)

    jit._call_hook(capture, str(specialization) + str(options), signature, 0, constexprs, options, [attrs], False)
    return specialization_from_hook(jit, captured["compile"], cc=cc)


__all__ = ["CallSpecialization", "current_cc", "current_triton_version", "installed_distribution",
           "specialization_for_call", "specialization_from_hook", "specialization_from_source"]
