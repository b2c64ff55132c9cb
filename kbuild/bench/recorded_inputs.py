"""The inputs of a recorded call: which way each argument is made (generated, replayed, as recorded, or refused),
the values themselves, and the call as it is on a GPU of another SM count.

The rule, per argument of the recorded sample (:func:`plan_arguments`; each spec states it in its
``provenance``):

* ``None`` (a ``"none"`` parameter) → None; a scalar → the recorded value (a non-finite float from
  ``{"float": "nan"}``), so sizes, strides, flags and ``ignore_index`` are the package's;
* a floating-point tensor → **generated**: seeded standard-normal values (never all zero) with the recorded
  shape and strides (a strided view into a buffer that spans them, when they are not contiguous);
* an integer or bool tensor → **replayed** from a capture of the same specialisation and call
  (``kbuild record --capture``, :mod:`kbuild.record.capture`), else **refused**: its values may be indices,
  offsets, labels or masks, which random values cannot stand for (an index out of range reads another row, or
  faults). A tensor with no elements is generated (empty);
* anything else (a tuple, an object such as a tensor descriptor) → refused.

SM-dependent values (:func:`on_target`): the recording marks what follows the device's SM count
(:func:`kbuild.record.machine.sm_dependent`: a grid of one program per SM, ``rows_per_program = ceil(n_rows /
sm_count)``). For a target whose GPU has another SM count (:mod:`kbuild.arch`'s part for it) they are recomputed:
grid dimensions, integer arguments, and, where the grid follows the SM count, tensor dimensions equal to it in
every sample (Liger's layer-norm backward keeps one row of partial sums per program, ``DW = [sm_count,
n_cols]``) with their contiguous strides.
Refused instead: a constexpr that follows the SM count, an argument whose new value no longer fits its recorded
type (``:16``, ``:1``): either is another specialisation; a target without an SM count in the table; a call
recorded with one SM (a CPU run), where what follows the SM count cannot be told apart from what does not.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kbuild.bench.spec import storage_span
from kbuild.declarations.signature import parse_type
from kbuild.record.capture import Captures
from kbuild.record.machine import derivation_source, sm_dependent, value_at

#: How each argument is made.
GENERATED, REPLAYED, RECORDED, NONE, REFUSED = "generated", "replayed", "recorded", "none", "refused"
FLOATS = {"torch.float16", "torch.bfloat16", "torch.float32", "torch.float64", "torch.float8_e4m3fn",
           "torch.float8_e5m2", "torch.float8_e4m3fnuz", "torch.float8_e5m2fnuz"}


class NotReproducible(Exception):
    """The recorded call cannot be made again here; the message says why."""


@dataclass(frozen=True)
class Argument:
    """How one argument of the recorded call is made."""

    name: str
    how: str
    """:data:`GENERATED`, :data:`REPLAYED`, :data:`RECORDED`, :data:`NONE` or :data:`REFUSED`."""
    why: str
    value: Any = None
    """The recorded description (a tensor's ``{"dtype", "shape", "strides"}``) or scalar value."""
    capture: str | None = None
    """The capture file a replayed tensor comes from."""

    def text(self) -> str:
        return f"{self.how}: {self.why}"


def is_tensor(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("shape"), list) and "dtype" in value


def scalar(value: Any) -> Any:
    """A recorded scalar as Python passes it (``{"float": "nan"}`` → ``float("nan")``)."""
    if isinstance(value, dict) and set(value) == {"float"}:
        return float(value["float"])
    return value


def capture_for(captures: Captures | None, spec_id: str, sample: Mapping[str, Any]) -> dict[str, Any] | None:
    """The capture entry of ``sample`` (equal as JSON), if ``captures`` holds one for the specialisation."""
    if captures is None:
        return None
    for entry in captures.of(spec_id):
        if entry["sample"] == sample:
            return entry
    return None


def plan_arguments(signature: Mapping[str, str], sample: Mapping[str, Any],
                   capture: Mapping[str, Any] | None) -> list[Argument]:
    """How each runtime argument of ``sample`` is made (the module docstring's rule)."""
    args = sample.get("args", {})
    out: list[Argument] = []
    for name, ty in signature.items():
        value = args.get(name)
        kind = parse_type(ty)
        if kind.is_none or value is None:
            if not kind.is_none:
                out.append(Argument(name, REFUSED, f"recorded as None but typed {ty}"))
            else:
                out.append(Argument(name, NONE, "passed None, as recorded"))
            continue
        if not kind.pointer:
            if isinstance(value, (dict, list)) and not (isinstance(value, dict) and set(value) == {"float"}):
                out.append(Argument(name, REFUSED, f"a {_kind(value)}, which a recording does not reproduce"))
            else:
                out.append(Argument(name, RECORDED, f"the recorded value {scalar(value)!r}", value))
            continue
        if not is_tensor(value) or not isinstance(value.get("strides"), list):
            out.append(Argument(name, REFUSED, f"a {_kind(value)}, not a tensor with recorded strides"))
            continue
        numel = math.prod(value["shape"])
        if value["dtype"] in FLOATS or numel == 0:
            out.append(Argument(name, GENERATED, "seeded normal values" if numel else "an empty tensor", value))
            continue
        files = (capture or {}).get("tensors", {})
        if name in files:
            out.append(Argument(name, REPLAYED, f"{value['dtype']} values captured from the recorded call "
                                                f"({files[name]})", value, files[name]))
            continue
        if capture is not None and "skipped" in capture:
            why = f"the call was not captured: {capture['skipped']}"
        else:
            why = "no capture of this call (kbuild record --capture N keeps integer and bool tensors)"
        out.append(Argument(name, REFUSED, f"integer and bool values may be indices, offsets, labels or masks, "
                                           f"which generated data cannot stand for; {why}", value))
    return out


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "tuple"
    if isinstance(value, dict) and "type" in value:
        return f"{value['type']} object"
    return type(value).__name__


# ----------------------------------------------------------------------------------------------
# Values


def torch_dtype(name: str) -> Any:
    import torch

    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise NotReproducible(f"torch has no dtype {name!r}")
    return dtype


def strided(shape: Sequence[int], strides: Sequence[int], dtype: Any, device: Any) -> tuple[Any, Any]:
    """``(buffer, view)``: an uninitialised buffer spanning a view of ``shape`` and ``strides``, and that view."""
    import torch

    buf = torch.empty(storage_span(shape, strides), dtype=dtype, device=device)
    return buf, buf.as_strided(tuple(shape), tuple(strides))


def generated(desc: Mapping[str, Any], gen: Any, device: Any) -> Any:
    """A tensor of the recorded dtype, shape and strides filled with standard-normal values from ``gen`` (the
    whole buffer, gaps of a strided view included)."""
    import torch

    dtype = torch_dtype(desc["dtype"])
    buf, view = strided(desc["shape"], desc["strides"], dtype, device)
    if buf.numel():
        direct = dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)
        values = torch.randn(buf.numel(), generator=gen, device=device, dtype=dtype if direct else torch.float32)
        buf.copy_(values)
    return view


def replayed(desc: Mapping[str, Any], tensor: Any, device: Any) -> Any:
    """The captured ``tensor`` (CPU) in a fresh view of the recorded strides on ``device``."""
    _, view = strided(desc["shape"], desc["strides"], tensor.dtype, device)
    view.copy_(tensor.to(device))
    return view


# ----------------------------------------------------------------------------------------------
# The call on another GPU

def _fits(ty: str, value: int) -> bool:
    t = parse_type(ty)
    if t.is_constant_one:
        return value == 1
    if t.hint == 16:
        return value % 16 == 0
    return True


def on_target(sample: Mapping[str, Any], samples: Sequence[Mapping[str, Any]], signature: Mapping[str, str],
              constexprs: Mapping[str, Any], sms: int | None) -> tuple[dict[str, Any], list[str]]:
    """``(sample, changes)``: the recorded ``sample`` as the call is on a GPU of ``sms`` SMs (the module
    docstring), and what changed, in words. :class:`NotReproducible` says why it cannot be."""
    marks = sm_dependent(samples, constexprs)
    recorded = sample.get("sm_count")
    if not marks or recorded == sms:
        return dict(sample), []
    if sms is None:
        raise NotReproducible(f"values follow the SM count ({', '.join(sorted(marks))}) and kbuild.arch has no SM "
                              f"count for the target")
    if type(recorded) is not int or recorded < 2:
        raise NotReproducible(f"values follow the SM count ({', '.join(sorted(marks))}) but the call was recorded "
                              f"with {recorded} SM (a CPU run): what follows it cannot be told on a {sms}-SM GPU")
    args: dict[str, Any] = dict(sample.get("args", {}))
    grid: list[int] = list(sample.get("grid") or [])
    out: dict[str, Any] = {"args": args, "grid": grid, "sm_count": sms}
    changes: list[str] = []
    for name, derivations in sorted(marks.items()):
        if name.startswith("grid["):
            i = int(name[5:-1])
            d = derivations[0]
            now = value_at(d, sample, constexprs, sms)
            assert now is not None, d  # a grid follows the SM count as K * sm_count
            changes.append(f"{name} = {d}: {grid[i]} → {now}")
            grid[i] = now
            continue
        usable = [d for d in derivations if d == "sm_count" or derivation_source(d) not in marks]
        if not usable:  # derived both ways: the later parameter follows the earlier
            order = [*signature, *constexprs]
            usable = [d for d in derivations if (src := derivation_source(d)) is not None and src.split(".")[0] in order
                      and name in order and order.index(src.split(".")[0]) < order.index(name)]
            if not usable:
                continue
        d = usable[0]
        found = value_at(d, sample, constexprs, sms)
        if found is None:
            raise NotReproducible(f"{name} = {d}: the recorded value of its source is unknown")
        now = found
        if name in constexprs:
            if now != constexprs[name]:
                raise NotReproducible(f"constexpr {name} = {d} would be {now} with {sms} SMs, recorded "
                                      f"{constexprs[name]} with {recorded}: another specialisation")
            continue
        if name in signature and not _fits(signature[name], now):
            raise NotReproducible(f"{name} = {d} would be {now} with {sms} SMs, which its recorded type "
                                  f"{signature[name]} does not hold: another specialisation")
        changes.append(f"{name} = {d}: {args.get(name)} → {now}")
        args[name] = now
    if any(n.startswith("grid[") for n in marks):
        for name, desc in sorted(args.items()):
            follows = [i for i in range(len(desc["shape"])) if _dim_follows(samples, name, i)] if is_tensor(
                desc) else []
            if not follows:
                continue
            shape = [sms if i in follows else d for i, d in enumerate(desc["shape"])]
            if desc["strides"] != contiguous_strides(desc["shape"]):
                raise NotReproducible(f"{name} has a dimension of the recorded SM count ({recorded}) and is not "
                                      f"contiguous: its layout with {sms} SMs is unknown")
            args[name] = {**desc, "shape": shape, "strides": contiguous_strides(shape)}
            changes.append(f"{name}.shape {desc['shape']} → {shape} (a dimension of the SM count)")
    return out, changes


def _dim_follows(samples: Sequence[Mapping[str, Any]], name: str, i: int) -> bool:
    """Whether dimension ``i`` of tensor ``name`` equals the SM count (≥ 2) in every sample (as
    :func:`kbuild.record.machine.sm_dependent` keeps only what holds in every sample)."""
    for s in samples:
        desc = s.get("args", {}).get(name)
        count = s.get("sm_count")
        if not is_tensor(desc) or len(desc["shape"]) <= i or type(count) is not int or count < 2:
            return False
        if desc["shape"][i] != count:
            return False
    return bool(samples)


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return strides[::-1]


def tensor_bytes(sample: Mapping[str, Any]) -> int:
    """Bytes of the sample's tensors (a tensor's view, by its element count)."""
    total = 0
    for desc in sample.get("args", {}).values():
        if is_tensor(desc):
            size = _ELEMENT_BYTES.get(str(desc["dtype"]).removeprefix("torch."), 4)
            total += math.prod(desc["shape"]) * size
    return total


_ELEMENT_BYTES = {"float64": 8, "int64": 8, "uint64": 8, "float32": 4, "int32": 4, "uint32": 4, "float16": 2,
                  "bfloat16": 2, "int16": 2, "uint16": 2, "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1,
                  "float8_e5m2": 1}


__all__ = ["FLOATS", "GENERATED", "NONE", "RECORDED", "REFUSED", "REPLAYED", "Argument", "NotReproducible", "capture_for",
           "contiguous_strides", "generated", "is_tensor", "on_target", "plan_arguments", "replayed", "scalar",
           "strided", "tensor_bytes", "torch_dtype"]
