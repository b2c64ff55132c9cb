"""The bench spec: everything needed to compile, feed, launch and judge one kernel.

This is the interface that ``[tool.kbuild.kernels].bench = "package.module:callable"`` points to in
user projects, and the one every kernel of the shipped suite (:mod:`kbuild.bench.kernels`)
implements. The callable returns a :class:`BenchSpec`; it may take a keyword ``small: bool`` that
asks for a reduced problem size (CPU tests, quick runs).

A spec says:

* the ``@triton.jit`` function, the Triton AOT ``signature`` of its runtime parameters, the fixed
  ``constexprs``, and a small fixed configuration space (:class:`Config`: block-size constexprs,
  ``num_warps``, ``num_stages``), so that it can be compiled ahead of time on a CPU for sm_80/sm_90;
* a seeded input generator (``make_inputs(seed, device)``: one value per runtime parameter, torch
  tensors on ``device``; never all zeros);
* the launch grid, as a function of the configuration's constexprs;
* which parameters are outputs, each bit-exact unless it declares a :class:`Tolerance`;
* FLOPs and bytes moved, for the roofline;
* optionally a torch ``reference`` (used to check the baseline and the output shapes).

A spec may also be made rather than written: :mod:`kbuild.bench.recorded` makes one from a recorded call
(``kbuild record``), referred to as ``kbuild.bench.recorded:recorded_spec?recording=...&...``: a reference may carry
keyword arguments for the callable after a ``?``, in URL query form (:func:`load_spec`), so that the measurement
worker, another process, loads the same spec from the same string.

Importing this module imports neither torch nor triton; :func:`compile_spec` imports triton.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kbuild import usercode
from kbuild.arch import modelled
from kbuild.declarations.signature import SignatureError, ast_source_args, parse_type
from kbuild.errors import CompileError, MissingDependencyError, UsageError

log = logging.getLogger(__name__)

#: Scalars allowed as constexpr values (the same as :data:`kbuild.declarations.kernel.Constexpr`).
Constexpr = bool | int | float | str


class BenchSpecError(UsageError):
    """A bench spec that cannot be imported, is inconsistent, or produces bad inputs. Exit status 2."""

    def __init__(self, spec: str, message: str) -> None:
        self.spec = spec
        self.detail = message
        super().__init__(f"bench spec {spec}: {message}")


@dataclass(frozen=True)
class Tolerance:
    """Allowed difference between the baseline's and a candidate's output (default: bit-exact).

    Only for kernels whose result legitimately depends on scheduling, e.g. atomics."""

    atol: float = 0.0
    rtol: float = 0.0


@dataclass(frozen=True)
class Config:
    """One point of a spec's configuration space: the constexprs that vary, and Triton's launch options.

    ``maxnreg`` (``None``: ptxas decides) caps registers per thread; ``num_ctas`` is the cluster size
    (Hopper); ``ptx_options`` extra ptxas flags (``None``: none; checked by
    :func:`kbuild.declarations.space.check_ptx_options`). All three are left out of :meth:`label` and :meth:`as_dict` at
    their defaults, so records of configurations without them read as before."""

    constexprs: Mapping[str, Constexpr] = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 3
    maxnreg: int | None = None
    num_ctas: int = 1
    ptx_options: str | None = None

    def label(self) -> str:
        parts = [f"{k}={v}" for k, v in self.constexprs.items()]
        extra = ([f"r{self.maxnreg}"] if self.maxnreg else []) + ([f"c{self.num_ctas}"] if self.num_ctas != 1 else [])
        extra += [f"ptx[{self.ptx_options}]"] if self.ptx_options else []
        return ",".join([*parts, f"w{self.num_warps}", f"s{self.num_stages}", *extra])

    def options(self) -> dict[str, Any]:
        """Triton compile options of this configuration (``parse_options`` input)."""
        opts: dict[str, Any] = {"num_warps": self.num_warps, "num_stages": self.num_stages}
        if self.maxnreg:
            opts["maxnreg"] = self.maxnreg
        if self.num_ctas != 1:
            opts["num_ctas"] = self.num_ctas
        if self.ptx_options:
            opts["ptx_options"] = self.ptx_options
        return opts

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"constexprs": dict(self.constexprs), "num_warps": self.num_warps,
                             "num_stages": self.num_stages}
        if self.maxnreg:
            d["maxnreg"] = self.maxnreg
        if self.num_ctas != 1:
            d["num_ctas"] = self.num_ctas
        if self.ptx_options:
            d["ptx_options"] = self.ptx_options
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Config:
        """The inverse of :meth:`as_dict`."""
        return cls(dict(d.get("constexprs", {})), int(d.get("num_warps", 4)), int(d.get("num_stages", 3)),
                   d.get("maxnreg") or None, int(d.get("num_ctas", 1)), d.get("ptx_options") or None)


Grid = tuple[int, int, int]


@dataclass(frozen=True)
class BenchSpec:
    """How to compile, feed, launch and judge one kernel (see the module docstring)."""

    name: str
    fn: Any
    """The ``@triton.jit`` function."""
    signature: Mapping[str, str]
    """AOT type of every runtime (non-constexpr) parameter: ``"*fp16:16"``, ``"i32:16"``, ``"fp32"``; the grammar of
    ``[tool.kbuild.kernels].signature`` (:mod:`kbuild.declarations.signature`), ``":1"`` (the constant 1) included."""
    constexprs: Mapping[str, Constexpr]
    """Constexpr parameters that are the same in every configuration."""
    configs: Sequence[Config]
    """The kernel's own autotune list (what ``@triton.autotune`` would choose from); the first entry is the
    default. ``kbuild bench`` keeps the fastest correct one: the baseline every tuning gain is measured against."""
    make_inputs: Callable[[int, Any], dict[str, Any]]
    """``(seed, device) -> {param: tensor or scalar}`` for every runtime parameter, outputs included."""
    grid: Callable[[Mapping[str, Constexpr]], Grid]
    """Launch grid from the constexprs of a configuration (fixed ones included)."""
    outputs: Mapping[str, Tolerance | None]
    """Output parameters; ``None`` means bit-exact."""
    flops: float
    bytes_moved: float
    archs: tuple[int, ...] = field(default_factory=modelled)
    """Compute capabilities (major*10+minor) the kernel supports; default: the architectures kbuild models
    (:func:`kbuild.arch.modelled`)."""
    reference: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    """Optional torch reference: inputs -> {output: expected tensor}, in any precision."""
    reference_tol: float = 2e-2
    """Largest accepted ‖out − ref‖ / ‖ref‖ of the baseline against ``reference``."""
    reference_is_a_configuration: bool = False
    """Whether ``reference`` runs this kernel itself under one of its configurations (a recorded spec: the recorded
    configuration's output), not an independent implementation: when that configuration's cubin is racy, no
    reference is defined (:func:`kbuild.tune.level1.search.search_configs` then searches nothing)."""
    needs_allocator: bool = False
    """Whether the kernel needs ``triton.set_allocator`` (device-side TMA descriptors)."""
    description: str = ""
    space: Sequence[Config] = ()
    """The level-1 search space of the tuner (wider than ``configs``; may contain configurations that fail to
    compile, fail to launch or compute wrong results: each candidate is checked). Empty: ``configs``."""
    ref: str = ""
    """Where the spec came from (``package.module:callable``); filled in by :func:`load_spec`."""
    inplace: frozenset[str] = frozenset()
    """Outputs whose prior contents the kernel reads (updated in place): never poisoned before a launch (the
    oracle still puts a guard band after them and compares them)."""
    reference_tols: Mapping[str, float] = field(default_factory=dict)
    """Per output, the largest accepted ‖out − ref‖ / ‖ref‖ of a configuration against ``reference`` where it is not
    ``reference_tol`` (a recorded spec: :func:`kbuild.bench.tolerance.config_tolerance` of its dtype)."""
    provenance: Mapping[str, str] = field(default_factory=dict)
    """How each parameter's value is made, in words, where the spec says (a recorded spec: generated, replayed
    from a capture or as recorded, and the rule that chose it)."""
    settle: Callable[[BenchSpec, str], BenchSpec] | None = None
    """What a measurement session does once, on its device, before using the spec: ``(spec, device) -> spec``
    (a recorded spec learns which arguments its kernel writes: :func:`kbuild.bench.recorded.probe_outputs`).
    None: nothing. See :func:`settled`."""

    # -- derived -----------------------------------------------------------------------------------
    def search_space(self) -> list[Config]:
        """The level-1 space: ``space``, else ``configs``; the autotune list's entries are always in it."""
        seen: dict[str, Config] = {c.label(): c for c in self.configs}
        for c in self.space:
            seen.setdefault(c.label(), c)
        return list(seen.values())

    def all_constexprs(self, config: Config) -> dict[str, Constexpr]:
        """The spec's constexprs with ``config``'s over them, as Triton takes them: a dtype a configuration holds
        in declaration form (``{"dtype": "fp16"}``, a point of a project's space) becomes Triton's dtype object."""
        varying = config.constexprs
        if any(isinstance(v, Mapping) for v in varying.values()):
            from kbuild.compile.triton_aot import triton_constexprs

            varying = triton_constexprs(dict(varying))
        return {**self.constexprs, **varying}

    def arg_names(self) -> list[str]:
        return list(self.fn.arg_names)

    def launch_args(self, inputs: Mapping[str, Any], config: Config) -> list[Any]:
        """Positional launch arguments of a ``CompiledKernel``: runtime values and constexprs in parameter order."""
        consts = self.all_constexprs(config)
        return [consts[n] if n in consts else inputs[n] for n in self.arg_names()]

    def tolerance(self, output: str) -> float:
        """The largest accepted ‖out − ref‖ / ‖ref‖ of ``output`` against ``reference`` (``reference_tols``, else
        ``reference_tol``)."""
        return float(self.reference_tols.get(output, self.reference_tol))

    def intensity(self) -> float:
        return self.flops / self.bytes_moved if self.bytes_moved else float("inf")

    @property
    def independent_reference(self) -> bool:
        """Whether ``reference`` is an implementation of its own (torch), so that any configuration's output can be
        judged against it, not only those the reference's configuration agrees with."""
        return self.reference is not None and not self.reference_is_a_configuration

    def label(self) -> str:
        return self.ref or self.name


# ----------------------------------------------------------------------------------------------
# Loading and validation


def spec_ref(callable_ref: str, /, **arguments: str) -> str:
    """The reference ``package.module:callable?name=value&...`` (URL query form, keys sorted) that :func:`load_spec`
    calls as ``callable(name=value, ...)``; ``callable_ref`` alone when there are no arguments."""
    if not arguments:
        return callable_ref
    return f"{callable_ref}?{urllib.parse.urlencode(sorted(arguments.items()))}"


def split_ref(ref: str) -> tuple[str, dict[str, str]]:
    """``("package.module:callable", {argument: value})`` of a reference (:func:`spec_ref`); a
    :class:`BenchSpecError` for an argument given twice or empty query text."""
    target, sep, query = ref.partition("?")
    if not sep:
        return ref, {}
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError as exc:
        raise BenchSpecError(ref, f"the arguments after '?' are not in URL query form: {exc}") from None
    arguments: dict[str, str] = {}
    for name, value in pairs:
        if name in arguments:
            raise BenchSpecError(ref, f"argument {name!r} is given twice")
        arguments[name] = value
    return target, arguments


def load_spec(ref: str, *, small: bool = False, python_path: Sequence[str] = ()) -> BenchSpec:
    """Import ``"package.module:callable"`` and return its validated :class:`BenchSpec`.

    ``callable`` may be a :class:`BenchSpec` itself or a function returning one (taking ``small``
    when it accepts that keyword). A reference may end in ``?name=value&...`` (:func:`spec_ref`): the callable is
    then called with those keyword arguments (strings). Any failure is a :class:`BenchSpecError` naming ``ref``."""
    target, arguments = split_ref(ref)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise BenchSpecError(ref, "expected 'package.module:callable'")
    module = usercode.import_module(module_name, error=lambda m: BenchSpecError(ref, m), paths=python_path)
    obj = getattr(module, attr, None)
    if obj is None:
        raise BenchSpecError(ref, f"module {module_name!r} has no attribute {attr!r}")
    if isinstance(obj, BenchSpec) and arguments:
        raise BenchSpecError(ref, f"{attr!r} is a BenchSpec, not a callable: it takes no arguments")
    if not isinstance(obj, BenchSpec):
        if not callable(obj):
            raise BenchSpecError(ref, f"{attr!r} is neither a BenchSpec nor a callable returning one")
        try:
            params = inspect.signature(obj).parameters
        except (TypeError, ValueError):
            params = {}  # type: ignore[assignment]
        takes_small = "small" in params
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        unknown = sorted(n for n in arguments if n not in params and not takes_any)
        if unknown:
            raise BenchSpecError(ref, f"{attr}() takes no argument {unknown[0]!r}")
        try:  # on the same path as the import: a spec made from a recording imports the recorded kernel's module
            with usercode.on_path(python_path):
                obj = obj(small=small, **arguments) if takes_small else obj(**arguments)
        except BenchSpecError:
            raise
        except Exception as exc:
            raise BenchSpecError(ref, f"calling {attr}() raised {type(exc).__name__}: {exc}") from None
        if not isinstance(obj, BenchSpec):
            raise BenchSpecError(ref, f"{attr}() returned {type(obj).__name__}, not a BenchSpec")
    spec = dataclasses.replace(obj, ref=ref)
    validate_spec(spec)
    return spec


def validate_spec(spec: BenchSpec) -> None:
    """Static consistency: parameters covered exactly once, types known, outputs named, configs sane."""
    where = spec.label()

    def fail(msg: str) -> BenchSpecError:
        return BenchSpecError(where, msg)

    names = getattr(spec.fn, "arg_names", None)
    if names is None:
        raise fail(f"fn is {type(spec.fn).__name__}, not a @triton.jit function")
    if not spec.configs:
        raise fail("the configuration space is empty; give at least one Config")
    for name, ty in spec.signature.items():
        try:
            parse_type(ty)
        except SignatureError as exc:
            raise fail(f"signature[{name!r}]: {exc}") from None
    if not spec.outputs:
        raise fail("names no outputs; set outputs={'param': None} for each output pointer")
    for out in spec.outputs:
        if not spec.signature.get(out, "").startswith("*"):
            raise fail(f"output {out!r} is not a pointer parameter of the signature")
    for what, names_ in (("inplace", spec.inplace), ("reference_tols", spec.reference_tols)):
        stray = sorted(n for n in names_ if n not in spec.outputs)
        if stray:
            raise fail(f"{what} names {stray[0]!r}, which is not an output")
    for i, cfg in enumerate([*spec.configs, *spec.space]):
        covered = [*spec.signature, *spec.constexprs, *cfg.constexprs]
        dup = {n for n in covered if covered.count(n) > 1}
        if dup:
            raise fail(f"configs[{i}]: parameters given more than once: {sorted(dup)}")
        missing = [n for n in names if n not in covered]
        extra = [n for n in covered if n not in names]
        if missing or extra:
            raise fail(f"configs[{i}]: parameters of {spec.fn.__name__} not covered {missing}, unknown {extra}")
        if cfg.num_warps not in (1, 2, 4, 8, 16, 32) or cfg.num_stages < 1:
            raise fail(f"configs[{i}]: num_warps must be a power of two ≤ 32 and num_stages ≥ 1")
        if cfg.maxnreg is not None and not 24 <= cfg.maxnreg <= 255:
            raise fail(f"configs[{i}]: maxnreg must be between 24 and 255 (or None), got {cfg.maxnreg}")
        if cfg.num_ctas not in (1, 2, 4, 8, 16):
            raise fail(f"configs[{i}]: num_ctas must be 1, 2, 4, 8 or 16, got {cfg.num_ctas}")
        if cfg.ptx_options is not None:
            from kbuild.declarations.space import SpaceError, check_ptx_options

            try:
                if check_ptx_options(cfg.ptx_options, "ptx_options") != cfg.ptx_options:
                    raise fail(f"configs[{i}]: ptx_options {cfg.ptx_options!r} is not in its normalised spelling "
                               f"{check_ptx_options(cfg.ptx_options, 'ptx_options')!r}")
            except SpaceError as exc:
                raise fail(f"configs[{i}]: {exc}") from None
    if spec.flops < 0 or spec.bytes_moved <= 0:
        raise fail("flops must be ≥ 0 and bytes_moved > 0")
    if not spec.archs:
        raise fail("archs is empty")


def validate_inputs(spec: BenchSpec, inputs: Mapping[str, Any], *, check_reference: bool = True) -> None:
    """Check what ``make_inputs`` produced: every runtime parameter present, dtypes match the signature,
    outputs contiguous tensors with the reference's shapes, divisibility hints hold, nothing all zeros."""
    import torch

    where = spec.label()
    missing = [n for n in spec.signature if n not in inputs]
    extra = [n for n in inputs if n not in spec.signature]
    if missing or extra:
        raise BenchSpecError(where, f"make_inputs() gave wrong parameters: missing {missing}, unexpected {extra}")
    for name, ty in spec.signature.items():
        t = parse_type(ty)
        value = inputs[name]
        if t.pointer:
            if not isinstance(value, torch.Tensor):
                raise BenchSpecError(where, f"input {name!r} must be a tensor (signature {ty}), got {type(value).__name__}")
            want = getattr(torch, t.torch_dtype, None) if t.torch_dtype else None
            if want is not None and value.dtype != want:
                raise BenchSpecError(where, f"input {name!r} has dtype {value.dtype}, signature says {ty}")
            if t.hint == 16 and value.data_ptr() % 16:
                raise BenchSpecError(where, f"input {name!r} is not 16-byte aligned but declared ':16'")
            if name in spec.outputs:
                if not non_overlapping(tuple(value.shape), tuple(value.stride())):
                    raise BenchSpecError(where, f"output {name!r} overlaps itself (strides {tuple(value.stride())} "
                                                f"for shape {tuple(value.shape)}): a launch would race on it")
            elif value.numel() and value.is_floating_point() and not bool(torch.any(value != 0)):
                raise BenchSpecError(where, f"input {name!r} is all zeros; generate random data")
        else:
            if isinstance(value, torch.Tensor):
                raise BenchSpecError(where, f"input {name!r} must be a scalar (signature {ty})")
            if t.hint == 16 and isinstance(value, int) and value % 16:
                raise BenchSpecError(where, f"scalar {name!r} = {value} is not divisible by 16 but declared ':16'")
            if t.is_constant_one and value != 1:
                raise BenchSpecError(where, f"scalar {name!r} = {value} is declared ':1' (compiled as the constant 1)")
    if check_reference and spec.reference is not None:
        expected = spec.reference(dict(inputs))
        for out in spec.outputs:
            if out not in expected:
                raise BenchSpecError(where, f"reference() gives no value for output {out!r}")
            got, want_shape = tuple(inputs[out].shape), tuple(expected[out].shape)
            if got != want_shape:
                raise BenchSpecError(where, f"output {out!r} has shape {got} but the reference gives {want_shape}")


def non_overlapping(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether no two elements of a tensor view of ``shape`` and ``strides`` share memory (any layout, strided
    views included; a dimension of size 1 or 0 does not count)."""
    if any(n == 0 for n in shape):
        return True
    dims = sorted((abs(s), n) for n, s in zip(shape, strides) if n > 1)
    extent = 0  # elements spanned by the dimensions taken so far, minus one
    for stride, n in dims:
        if stride <= extent:
            return False
        extent += (n - 1) * stride
    return True


def storage_span(shape: Sequence[int], strides: Sequence[int]) -> int:
    """Elements of storage a view of ``shape`` and ``strides`` (non-negative) reaches from its first element."""
    if any(n == 0 for n in shape):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, strides))


def settled(spec: BenchSpec, device: str) -> BenchSpec:
    """``spec`` as a measurement session on ``device`` uses it: :attr:`BenchSpec.settle` applied (validated
    again), or ``spec`` itself."""
    if spec.settle is None:
        return spec
    out = dataclasses.replace(spec.settle(spec, device), settle=None)
    validate_spec(out)
    return out


# ----------------------------------------------------------------------------------------------
# Ahead-of-time compilation


def ast_source(spec: BenchSpec, config: Config) -> Any:
    """Triton's ``ASTSource`` (``GluonASTSource`` for a Gluon kernel) for one configuration, built as ``kbuild compile`` builds it
    (:func:`kbuild.declarations.signature.ast_source_args`: constexprs, ``:16`` divisibility, ``:1`` constants)."""
    from kbuild.compile.triton_aot import ast_source_class

    try:
        args = ast_source_args(spec.arg_names(), spec.signature, spec.all_constexprs(config))
    except SignatureError as exc:
        raise BenchSpecError(spec.label(), f"[{config.label()}]: {exc}") from None
    return ast_source_class(spec.fn)(fn=spec.fn, **args)


def suite_archs() -> tuple[int, ...]:
    """The compute capabilities ``kbuild bench`` measures on: the architectures kbuild models
    (:func:`kbuild.arch.modelled`), newest first (without a GPU, the error names the first)."""
    return tuple(sorted(modelled(), reverse=True))


def compile_spec(spec: BenchSpec, config: Config, arch: int) -> Any:
    """Compile one configuration for ``sm_<arch>`` exactly as ``kbuild compile`` does (line info off, private
    cache); returns Triton's ``CompiledKernel`` (no GPU needed)."""
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import make_backend
    except ImportError as exc:  # pragma: no cover - triton is a dependency
        raise MissingDependencyError(f"Triton is not installed ({exc})") from None
    from kbuild.compile.triton_aot import hermetic_compile

    if arch not in spec.archs:
        raise BenchSpecError(spec.label(), f"does not support sm_{arch} (supports {', '.join(f'sm_{a}' for a in spec.archs)})")
    options = make_backend(GPUTarget("cuda", arch, 32)).parse_options(config.options())
    try:
        return hermetic_compile(ast_source(spec, config), arch, options.__dict__)
    except Exception as exc:
        raise CompileError(f"compiling {spec.label()} [{config.label()}] for sm_{arch} failed: "
                           f"{type(exc).__name__}: {exc}") from exc
