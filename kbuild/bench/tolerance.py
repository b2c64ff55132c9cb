"""How far another configuration's output may be from the recorded configuration's: a tolerance by dtype and
reduction length.

Level 1 changes a kernel's configuration (warps, stages, block sizes), and with it the order in which a reduction
adds its terms, so a correct candidate need not be bit-identical to the configuration a package runs. It is
judged by the norm-relative error of each output against that configuration's own output on the same inputs
(:mod:`kbuild.tune.measure.config_session`: ``‖out − ref‖ / ‖ref‖``), accepted up to

.. math::

    \\mathrm{tol}(d, K) = 2\\,\\varepsilon(d) + 2\\,\\varepsilon(\\mathrm{fp32})\\,\\sqrt{K}

* ``ε(d)`` is the machine epsilon of the output's dtype ``d`` (``2^-7`` for bf16, ``2^-10`` for fp16, ``2^-23``
  for fp32, ``2^-52`` for fp64; fp8 types ``2^-3`` / ``2^-2``): two configurations that round the same value on
  either side of a rounding boundary differ by one unit in the last place, at most ``ε(d)`` relative to the
  element, so at most ``ε(d)`` in the norm; the factor 2 leaves room for elements near zero.
* ``ε(fp32) · √K`` is the spread of a sum of ``K`` terms accumulated in fp32 in two orders (rounding errors of
  random sign add like a random walk). Triton kernels accumulate in fp32 as a rule (Triton 3.6's ``tl.sum``
  keeps its input's type, ``triton/language/standard.py`` ``_pick_sum_dtype``, so a kernel that sums bf16 in bf16
  varies more): the formula takes fp32, which errs on the strict side, where a mistake rejects a correct
  candidate (a lost speed-up), never accepts a wrong one. An fp64 output takes ``ε(fp64)`` there.
* ``K`` is the reduction length. From outside a kernel it is not known; :func:`reduction_length` takes the
  largest dimension of any floating-point tensor argument, an upper bound for a reduction along one dimension
  (a row, a GEMM's K), which only loosens the bound by its square root.

Integer and bool outputs are exact (``tol = 0``): integer sums do not depend on their order.

Worked values: bf16 with K = 4,096 gives 0.0156; fp16 0.00197; fp32 1.55e-5; fp32 elementwise (K = 1) 4.8e-7.

SASS-level edits keep the configuration and are judged bit for bit against the untouched baseline
(:class:`kbuild.tune.measure.oracle.Oracle`): this tolerance is for configuration changes only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

#: Machine epsilon (2^-mantissa bits) of each floating element type, by its declaration name
#: (:data:`kbuild.declarations.signature.ELEMENT_TYPES`).
EPSILON: dict[str, float] = {
    "fp64": 2.0**-52, "fp32": 2.0**-23, "tf32": 2.0**-10, "fp16": 2.0**-10, "bf16": 2.0**-7,
    "fp8e4nv": 2.0**-3, "fp8e4b15": 2.0**-3, "fp8e5": 2.0**-2,
}
#: Element types compared exactly.
EXACT = frozenset({"i1", "u1", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64"})
#: The factor on each term (see the module docstring).
SAFETY = 2.0

#: torch's dtype names (``"torch.bfloat16"`` as recorded) → declaration names.
TORCH_NAMES = {
    "float64": "fp64", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8e4nv",
    "float8_e5m2": "fp8e5", "bool": "u1", "int8": "i8", "uint8": "u8", "int16": "i16", "uint16": "u16",
    "int32": "i32", "uint32": "u32", "int64": "i64", "uint64": "u64",
}


def element_type(dtype: str) -> str:
    """The declaration name of a dtype given as ``"bf16"``, ``"torch.bfloat16"`` or ``"bfloat16"``; a ValueError
    for a dtype this module does not know."""
    name = dtype.removeprefix("torch.")
    name = TORCH_NAMES.get(name, name)
    if name not in EPSILON and name not in EXACT:
        raise ValueError(f"no tolerance is known for dtype {dtype!r}")
    return name


def config_tolerance(dtype: str, reduction: int) -> float:
    """The largest accepted norm-relative error of an output of ``dtype`` after a reduction of ``reduction``
    terms, between two configurations of a kernel (0.0: exact). See the module docstring for the formula."""
    name = element_type(dtype)
    if name in EXACT:
        return 0.0
    if reduction < 1:
        raise ValueError(f"reduction length must be at least 1, got {reduction}")
    accumulate = EPSILON["fp64"] if name == "fp64" else EPSILON["fp32"]
    return SAFETY * EPSILON[name] + SAFETY * accumulate * math.sqrt(reduction)


def relative_error(out: Any, ref: Any) -> float:
    """``‖out − ref‖ / ‖ref‖`` of two torch tensors, in float64 (NaN where ``out`` holds NaN: a poisoned, unwritten
    output is never within a tolerance)."""
    return float((out.double() - ref.double()).norm() / max(float(ref.double().norm()), 1e-30))


def within(out: Any, ref: Any, tol: float) -> tuple[bool, float]:
    """Whether ``out`` is within ``tol`` of ``ref`` (:func:`relative_error`; exact when ``tol`` is 0), and the
    error."""
    err = relative_error(out, ref)
    return bool(err <= tol), err


def reduction_length(shapes: Iterable[Sequence[int]]) -> int:
    """An upper bound of a kernel's reduction length from its floating-point tensor arguments' shapes: the largest
    dimension of any of them (1 when there are none)."""
    return max((int(d) for shape in shapes for d in shape), default=1) or 1


__all__ = ["EPSILON", "EXACT", "SAFETY", "TORCH_NAMES", "config_tolerance", "element_type", "reduction_length",
           "relative_error", "within"]
