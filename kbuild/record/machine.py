"""Values that depend on the machine a call was recorded on: derived from the device's SM count.

A package that sizes its launch by the GPU (Liger-Kernel's RMSNorm backward launches ``grid = (sm_count,)`` and
passes ``rows_per_program = ceil(n_rows / sm_count)``) makes a call specialise one way on one GPU and perhaps
another way on the next: 4,096 rows give 32 rows per program on a 132-SM H100 or H200 (``i32:16``), but 38 on a
108-SM A100 (``i32``), and 4,096 on a CPU, where Liger counts one SM. A recording marks such values so that a
build can say what a recording from one machine does not cover on another.

Each sample holds the SM count of the device it was recorded on (``sm_count``: the GPU's multiprocessor count;
for ``--mode cpu`` the count the workload sees on the CPU, 1 unless ``--sm-count`` says otherwise).
:func:`derivations` proposes, for one sample, how each integer argument, integer constexpr and grid dimension may
have been derived from it (``s`` below):

* ``"sm_count"``: the value equals ``s`` (``s >= 2``); for a grid dimension also ``"k * sm_count"``, ``k`` ≤ 8;
* ``"ceil(X / sm_count)"``: the value ``v >= 2`` equals ``ceil(n / s)`` for ``X`` another integer argument or
  constexpr, or a tensor dimension (``X.shape[i]``), of value ``n > v``.

With ``s = 1`` (a CPU run) every value equals ``ceil(v / 1)``, so equal values cannot be told apart by one call:
there the rules apply only to a *persistent* launch (its grid has ``s`` programs, ``grid = (1,)``), where ``v = n``
is proposed for each other value ``n`` equal to it, and ``grid[i] = 1`` as ``"sm_count"``. Values below 2 are
never proposed (every unit stride would be).

:func:`sm_dependent` keeps, per specialisation, the names and derivations that hold in *every* recorded sample
(a coincidence in one call does not survive another shape). From CPU samples alone it keeps a derivation only
when its source took two values or more across the samples, the value following it (``rows_per_program`` and
``n_rows`` over two row counts; not ``BLOCK_SIZE`` and ``n_cols``, equal in every call): a workload recorded on a
CPU with a single shape per kernel marks nothing. Both directions survive (``n_rows`` is also proposed as
``ceil(rows_per_program / sm_count)``). They are candidates, not proofs: a build recomputes them for a target's SM
count and reports where the specialisation would differ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: Largest multiple of the SM count proposed for a grid dimension (occupancy-sized grids: 2 or 4 per SM).
MAX_GRID_MULTIPLE = 8


def _ceil_div(n: int, d: int) -> int:
    return -(-n // d)


def _ints(sample: Mapping[str, Any], constexprs: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
    """``(candidates, sources)``: integer arguments and constexprs (by name), and those plus tensor dimensions."""
    scalars: dict[str, int] = {}
    dims: dict[str, int] = {}
    for name, value in sample.get("args", {}).items():
        if type(value) is int:
            scalars[name] = value
        elif isinstance(value, dict) and isinstance(value.get("shape"), list):
            for i, d in enumerate(value["shape"]):
                if type(d) is int:
                    dims[f"{name}.shape[{i}]"] = d
    for name, value in constexprs.items():
        if type(value) is int:
            scalars[name] = value
    return scalars, {**scalars, **dims}


def derivations(sample: Mapping[str, Any], constexprs: Mapping[str, Any]) -> dict[str, list[str]]:
    """For one sample: name (an argument, a constexpr, ``grid[i]``) → the derivations from the SM count that fit."""
    s = sample.get("sm_count")
    if type(s) is not int or s < 1:
        return {}
    grid = sample.get("grid")
    dims = [g for g in grid if type(g) is int] if isinstance(grid, list) else []
    programs = 1
    for g in dims:
        programs *= g
    persistent = bool(dims) and programs == s
    if s == 1 and not persistent:
        return {}
    scalars, sources = _ints(sample, constexprs)
    out: dict[str, list[str]] = {}
    for name, v in scalars.items():
        if v < 2:
            continue
        found = ["sm_count"] if s >= 2 and v == s else []
        for src, n in sources.items():
            if src == name or n < 2:
                continue
            if (s == 1 and n == v) or (s >= 2 and n > v and _ceil_div(n, s) == v):
                found.append(f"ceil({src} / sm_count)")
        if found:
            out[name] = sorted(found)
    for i, g in enumerate(dims):
        if s == 1:
            if g == 1:
                out[f"grid[{i}]"] = ["sm_count"]
        elif g % s == 0 and 1 <= g // s <= MAX_GRID_MULTIPLE:
            out[f"grid[{i}]"] = ["sm_count" if g == s else f"{g // s} * sm_count"]
    return out


def sm_dependent(samples: Sequence[Mapping[str, Any]], constexprs: Mapping[str, Any]) -> dict[str, list[str]]:
    """The derivations that hold in every sample of a specialisation (none without samples). When every sample
    was recorded with one SM (a CPU run), a ``ceil(X / sm_count)`` is kept only if ``X`` took two values or more
    across the samples (the value followed it), and a grid dimension only beside such a value."""
    common: dict[str, set[str]] | None = None
    for sample in samples:
        found = {k: set(v) for k, v in derivations(sample, constexprs).items()}
        common = found if common is None else {k: common[k] & found[k] for k in common if k in found}
    if common and all(sample.get("sm_count") == 1 for sample in samples):
        seen: dict[str, set[int]] = {}
        for sample in samples:
            for src, n in _ints(sample, constexprs)[1].items():
                seen.setdefault(src, set()).add(n)
        varying = {f"ceil({src} / sm_count)" for src, values in seen.items() if len(values) > 1}
        scalars = {k: v & varying for k, v in common.items() if not k.startswith("grid[")}
        common = {**{k: v for k, v in scalars.items() if v},
                  **({k: v for k, v in common.items() if k.startswith("grid[")} if any(scalars.values()) else {})}
    return {k: sorted(v) for k, v in sorted((common or {}).items()) if v}


def derivation_source(derivation: str) -> str | None:
    """The value a ``ceil(SOURCE / sm_count)`` derivation divides (an argument, a constexpr or ``NAME.shape[i]``);
    None for the other forms (``sm_count``, ``K * sm_count``)."""
    if derivation.startswith("ceil(") and derivation.endswith(" / sm_count)"):
        return derivation[len("ceil("):-len(" / sm_count)")]
    return None


def value_at(derivation: str, sample: Mapping[str, Any], constexprs: Mapping[str, Any], sms: int) -> int | None:
    """The value ``derivation`` (one of :func:`derivations`' forms) gives with ``sms`` SMs for ``sample``; None when
    its source's recorded value is unknown."""
    if derivation == "sm_count":
        return sms
    if derivation.endswith(" * sm_count"):
        return int(derivation.split(" ")[0]) * sms
    source = derivation_source(derivation)
    if source is not None:
        n = _ints(sample, constexprs)[1].get(source)
        return _ceil_div(n, sms) if n is not None else None
    return None


def _follows_later(name: str, derived: Sequence[str], marks: Mapping[str, Sequence[str]],
                   order: Mapping[str, int]) -> bool:
    """Whether ``name`` and a parameter after it each derive from the other (a CPU recording, one SM, cannot tell
    which follows the SM count): the later one is taken to be derived (``n_rows`` and then ``rows_per_program``)."""
    for d in derived:
        other = derivation_source(d)
        if other is not None:
            if (f"ceil({name} / sm_count)" in marks.get(other, ())
                    and order.get(other, -1) > order.get(name, len(order))):
                return True
    return False


def integer_type(value: int) -> str:
    """The declaration type Triton 3.6's JIT gives an integer argument (specialised: not ``do_not_specialize``):
    ``i32:1`` for 1, ``:16`` when divisible by 16, ``i64`` beyond 32 bits."""
    if value == 1:
        return "i32:1"
    ty = "i32" if -(2**31) <= value < 2**31 else "i64"
    return ty + (":16" if value % 16 == 0 else "")


def on_other_gpu(samples: Sequence[Mapping[str, Any]], constexprs: Mapping[str, Any], signature: Mapping[str, str],
                 sms: int) -> list[str]:
    """What a specialisation's recorded calls become on a GPU of ``sms`` SMs, where a value follows the SM count
    (:func:`sm_dependent`): each argument whose type (divisibility, the constant 1) or constexpr whose value would
    change, in words (``rows_per_program = ceil(n_rows / sm_count): 38 (i32) with 108 SMs, recorded 32
    (i32:16)``). Such a call specialises another way there: this specialisation does not cover it. A grid that
    follows the SM count changes no specialisation and is not listed. Empty: the calls specialise alike."""
    marks = sm_dependent(samples, constexprs)
    order = {n: i for i, n in enumerate([*signature, *constexprs])}
    out: list[str] = []
    for name, derived in marks.items():
        if name.startswith("grid[") or _follows_later(name, derived, marks, order):
            continue
        derivation = next((d for d in derived if ".shape[" not in d), derived[0])
        for sample in samples:
            if sample.get("sm_count") == sms:
                continue
            now = value_at(derivation, sample, constexprs, sms)
            if now is None:
                continue
            if name in constexprs:
                before = constexprs[name]
                if now != before:
                    out.append(f"{name} = {derivation}: {now} with {sms} SMs, recorded {before} "
                               f"(with {sample.get('sm_count')})")
                    break
            elif name in signature:
                recorded = "".join(signature[name].split())
                became = integer_type(now)
                if became != recorded and not (recorded.endswith(":1") and became.endswith(":1")):
                    out.append(f"{name} = {derivation}: {now} ({became}) with {sms} SMs, recorded "
                               f"{sample.get('args', {}).get(name)!r} ({recorded}, with {sample.get('sm_count')})")
                    break
    return out


__all__ = ["MAX_GRID_MULTIPLE", "derivation_source", "derivations", "integer_type", "on_other_gpu", "sm_dependent",
           "value_at"]
