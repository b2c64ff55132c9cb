"""The bench spec of a CUDA C++ kernel: what the tuner needs to feed, launch and judge a ``__global__`` function.

``[[tool.kbuild.cuda.kernels]].bench = "package.module:callable"`` points here: the callable returns a
:class:`CudaBenchSpec` (it may take ``small: bool``). It is the Triton spec's interface (:mod:`kbuild.bench.spec`)
for a kernel kbuild did not generate: the same seeded ``make_inputs``, ``outputs`` (bit-exact unless a
:class:`~kbuild.bench.spec.Tolerance` is declared), ``reference``, FLOPs and bytes; instead of a ``@triton.jit``
function and its configurations it names the kernel's parameters in order (``signature``, the same type grammar:
``"*fp16"``, ``"i64"``, ``"fp32"``), and the launch: ``grid`` and ``block`` (tuples, or callables of the inputs)
and the dynamic ``shared`` memory in bytes.

The measurement worker launches the cubin's function through the CUDA driver API with exactly these
(:mod:`kbuild.tune.measure.cuda_session`), and the oracle (:mod:`kbuild.tune.measure.oracle`) uses the spec
through the methods the Triton spec has (``grid``, ``all_constexprs``, ``launch_args``, ``label``).

Importing this module imports neither torch nor triton.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kbuild import usercode
from kbuild.arch import modelled
from kbuild.declarations.signature import SignatureError, parse_type

from .spec import BenchSpecError, Tolerance

Dims = tuple[int, int, int]

#: Scalar parameter types the driver-API launch packs (:data:`kbuild.device.cuda.SCALAR_CTYPES` has each one's ctypes).
SCALAR_TYPES = ("i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64", "fp32", "fp64")


@dataclass(frozen=True)
class CudaBenchSpec:
    """How to feed, launch and judge one CUDA ``__global__`` function (see the module docstring)."""

    name: str
    signature: Mapping[str, str]
    """Every parameter of the kernel, in order, with its type: ``"*fp16"`` a pointer (passed as a tensor), ``"i64"``
    an integer, ``"fp32"`` a float."""
    make_inputs: Callable[[int, Any], dict[str, Any]]
    """``(seed, device) -> {param: tensor or scalar}`` for every parameter, outputs included; never all zeros."""
    grid: Dims | Callable[[Mapping[str, Any]], Dims]
    """Blocks (x, y, z): a tuple, or a function of the inputs."""
    block: Dims | Callable[[Mapping[str, Any]], Dims]
    """Threads per block (x, y, z): a tuple, or a function of the inputs."""
    outputs: Mapping[str, Tolerance | None]
    """Output parameters; ``None`` means bit-exact."""
    flops: float
    bytes_moved: float
    shared: int = 0
    """Dynamic shared memory per block, in bytes."""
    accumulate: tuple[str, ...] = ()
    """Outputs the kernel adds into (``atomicAdd`` on a caller-zeroed buffer): zeroed before each launch instead of
    poisoned with NaN. Usually with a :class:`~kbuild.bench.spec.Tolerance`, since atomics sum in any order."""
    archs: tuple[int, ...] = field(default_factory=modelled)
    """Compute capabilities the kernel supports; default: the architectures kbuild models."""
    reference: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    """Optional torch reference: inputs -> {output: expected tensor}."""
    reference_tol: float = 2e-2
    description: str = ""
    ref: str = ""
    """Where the spec came from (``package.module:callable``); filled in by :func:`load_cuda_spec`."""

    # -- the Triton spec's interface, as the oracle uses it ------------------------------------------------------
    def all_constexprs(self, config: Any = None) -> dict[str, Any]:
        return {}

    def launch_args(self, inputs: Mapping[str, Any], config: Any = None) -> list[Any]:
        return [inputs[n] for n in self.signature]

    def label(self) -> str:
        return self.ref or self.name

    def dims(self, inputs: Mapping[str, Any]) -> tuple[Dims, Dims]:
        """(grid, block) for ``inputs``."""
        g = self.grid(inputs) if callable(self.grid) else self.grid
        b = self.block(inputs) if callable(self.block) else self.block
        return _dims(g), _dims(b)


def _dims(value: Any) -> Dims:
    t = tuple(int(v) for v in value)
    return (*t, 1, 1, 1)[:3]  # type: ignore[return-value]


def validate_cuda_spec(spec: CudaBenchSpec) -> None:
    """Static consistency: types known, outputs are pointer parameters, dimensions sane."""
    where = spec.label()

    def fail(msg: str) -> BenchSpecError:
        return BenchSpecError(where, msg)

    if not spec.signature:
        raise fail("signature is empty; list every kernel parameter in order")
    for name, ty in spec.signature.items():
        try:
            t = parse_type(ty)
        except SignatureError as exc:
            raise fail(f"signature[{name!r}]: {exc}") from None
        if not t.pointer and "".join(ty.split()).split(":")[0] not in SCALAR_TYPES:
            raise fail(f"signature[{name!r}]: {ty!r} cannot be passed to a CUDA kernel (pointers and "
                       f"{', '.join(SCALAR_TYPES)})")
    if not spec.outputs:
        raise fail("names no outputs; set outputs={'param': None} for each output pointer")
    for out in spec.outputs:
        if not spec.signature.get(out, "").startswith("*"):
            raise fail(f"output {out!r} is not a pointer parameter of the signature")
    for what in ("grid", "block"):
        value = getattr(spec, what)
        if not callable(value):
            try:
                d = _dims(value)
            except (TypeError, ValueError):
                raise fail(f"{what} must be a tuple of up to three integers or a function, got {value!r}") from None
            if min(d) < 1:
                raise fail(f"{what} {d} has a dimension below 1")
    for name in spec.accumulate:
        if name not in spec.outputs:
            raise fail(f"accumulate names {name!r}, which is not an output")
    if spec.shared < 0:
        raise fail(f"shared must be >= 0, got {spec.shared}")
    if spec.flops < 0 or spec.bytes_moved <= 0:
        raise fail("flops must be >= 0 and bytes_moved > 0")
    if not spec.archs:
        raise fail("archs is empty")


def load_cuda_spec(ref: str, *, small: bool = False, python_path: tuple[str, ...] | list[str] = ()) -> CudaBenchSpec:
    """Import ``"package.module:callable"`` and return its validated :class:`CudaBenchSpec`; any failure is a
    :class:`~kbuild.bench.spec.BenchSpecError` (exit status 2) naming ``ref``."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise BenchSpecError(ref, "expected 'package.module:callable'")
    module = usercode.import_module(module_name, error=lambda m: BenchSpecError(ref, m), paths=python_path)
    obj = getattr(module, attr, None)
    if obj is None:
        raise BenchSpecError(ref, f"module {module_name!r} has no attribute {attr!r}")
    if not isinstance(obj, CudaBenchSpec):
        if not callable(obj):
            raise BenchSpecError(ref, f"{attr!r} is neither a CudaBenchSpec nor a callable returning one")
        try:
            takes_small = "small" in inspect.signature(obj).parameters
        except (TypeError, ValueError):
            takes_small = False
        try:
            obj = obj(small=small) if takes_small else obj()
        except BenchSpecError:
            raise
        except Exception as exc:
            raise BenchSpecError(ref, f"calling {attr}() raised {type(exc).__name__}: {exc}") from None
        if not isinstance(obj, CudaBenchSpec):
            raise BenchSpecError(ref, f"{attr}() returned {type(obj).__name__}, not a CudaBenchSpec")
    spec = dataclasses.replace(obj, ref=ref)
    validate_cuda_spec(spec)
    return spec


__all__ = ["SCALAR_TYPES", "CudaBenchSpec", "Tolerance", "load_cuda_spec", "validate_cuda_spec"]
