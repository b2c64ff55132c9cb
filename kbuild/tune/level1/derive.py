"""A level-1 space for a kernel that declares none: :func:`derive_space`.

The space starts from what cannot change a kernel's results, read from Triton 3.6's NVIDIA backend
(``triton/backends/nvidia/compiler.py``: ``CUDAOptions``, ``make_ttgir``, ``make_cubin``; ``driver.py``'s launcher):

* ``num_warps`` (1 to 32): ``add_convert_to_ttgpuir`` lays the same program out over more or fewer warps. The
  arithmetic is the same; a reduction's partial sums are added in another tree, so floating-point results agree
  within rounding, not bit for bit (the tuner checks them against the recorded configuration's outputs with a
  tolerance set by dtype and reduction length);
* ``num_stages``: the software-pipelining depth of loops (``add_hopper_warpspec``, ``add_assign_latencies``,
  ``add_pipeline`` take it); loads are issued earlier, nothing is computed differently. Derived only for a kernel
  with a runtime loop (``range``/``tl.range``, not ``tl.static_range``): without one it changes no code;
* ``maxnreg``: the ``ttg.maxnreg`` attribute, ptxas's ``.maxnreg``: how many registers ptxas may allocate. The
  caps derived are a point's occupancy steps: those at which 1 to 4 blocks of *its* warps fit on an SM
  (``registers_per_sm / (32 × warps × blocks)``, rounded down to ptxas's allocation unit of 8; :mod:`kbuild.arch`),
  from 64 registers up and below 255 (a cap of 255 or more caps nothing). For 4 warps on sm_90 that is 168 (3
  blocks) and 128 (4 blocks); for 8 warps 128, 80 and 64. The declared spaces' best matmul on an H200 was such a
  cap (``r168``, 1.246×: ``benchmarks/results/h200/issue15/``), which the earlier derivation (caps at which 16 and
  32 warps fit, 128 and 64 for every point) could not reach;
* ``ptx_options``: ``make_cubin`` appends them to ptxas's command line. One flag is derived,
  ``--register-usage-level=10`` (ptxas's default is 5): how freely ptxas trades registers for better code, which
  changes allocation and scheduling, never the arithmetic. Flags that do change results (``--fmad``, which is
  Triton's ``enable_fp_fusion``; ``--optimize-float-atomics``) are refused by
  :func:`kbuild.declarations.space.check_ptx_options`.

Hopper's options (read from the same source), and which of them are launch options:

* ``num_ctas`` (thread block clusters; ``parse_options`` refuses more than 1 below sm_90, and the launcher
  launches ``grid × num_ctas`` blocks with a cluster dimension): a launch option. ``PlanCTA`` spreads a program's
  tensors over the cluster's blocks, which is what a ``tl.dot`` tile gains from; derived as ``{1, 2}`` where the
  architecture has clusters (:attr:`kbuild.arch.Architecture.clusters`) and the kernel has a ``tl.dot`` in a loop;
* warp specialisation: ``tl.range(..., warp_specialize=True)`` (``language/core.py``) marks a loop in the source
  for ``add_hopper_warpspec``; no option turns it on. Not derived (a source change);
* TMA: ``tl.make_tensor_descriptor`` and host ``TensorDescriptor`` arguments in the source (``add_tma_lowering``
  lowers those); no option turns pointer loads into TMA. Not derived (a source change);
* persistent grids: a loop over tiles with ``tl.num_programs`` in the source and a grid the caller sizes to the
  SM count. Not derived (a source and launch-site change);
* ``launch_pdl`` (programmatic dependent launch): a launch option, but a kernel that does not wait with
  ``gdc_wait`` before reading its predecessor's output may read it early. Not derived (needs the source);
* ``launch_cooperative_grid``: only grid-wide synchronisation in the source needs it; not derived.

Options that change results are never varied: ``enable_fp_fusion``, ``default_dot_input_precision``,
``max_num_imprecise_acc_default``, ``enable_reflect_ftz``, ``sanitize_overflow``, ``debug`` (kept as recorded).

Constexprs enter the space where they are *declared tunable* (:attr:`kbuild.tune.level1.subject.Subject.
tunable`: an autotuner's configs, a bench spec's autotune list), or *shown* safe by checking outputs: for a block
size (:func:`constexpr_candidates`: half and twice the value of a constexpr named ``BLOCK``/``TILE``/``CHUNK``) an
:class:`OutputCheck` runs the kernel with the other value on the recorded calls, with the caller's own grid, and
compares its outputs with the recorded configuration's (:mod:`kbuild.tune.level1.output_check`: on a GPU of the
target, else Triton's interpreter on the CPU). A value it accepts becomes a dimension (:attr:`DerivedSpace.
shown_safe`), which the run time may serve to a call that asks for the recorded one; one it refuses, or that no
check could run for, is listed as unverified with the reason and left out.

Every dimension keeps the default's value, and the default is the space's first point. A space larger than
``max_points`` is thinned in a fixed order, each step recorded (:data:`THINNING`).
"""

from __future__ import annotations

import ast
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kbuild.bench.spec import Config

from .space import Space
from .subject import Subject

#: Warps per block a derived space tries (a power of two; 32 warps is the 1,024 threads a block may have).
WARPS = (1, 2, 4, 8, 16, 32)
#: Pipelining depths tried for a kernel with a runtime loop.
STAGES = (1, 2, 3, 4)
#: Blocks of a point's warps per SM whose register cap ``maxnreg`` is derived
#: (``registers_per_sm / (32 × warps × blocks)``, rounded down to a multiple of :data:`MAXNREG_UNIT`).
MAXNREG_BLOCKS = (1, 2, 3, 4)
#: ptxas allocates registers per thread in units of 8; a cap between two units is the lower one.
MAXNREG_UNIT = 8
#: Caps below this are not derived (a kernel worth a cap spills under it); 255 and above cap nothing.
MAXNREG_FLOOR = 64
#: The ptxas flags a derived space tries besides none (each keeps the arithmetic; see the module docstring).
PTX_FLAGS = ("--register-usage-level=10",)
#: Cluster sizes tried for a kernel with a ``tl.dot`` in a loop, where the architecture has clusters.
CTAS = (1, 2)
#: Points a derived space holds at most unless the caller says otherwise.
DEFAULT_MAX_POINTS = 128
#: How a space over ``max_points`` is thinned, in order: (dimension, what is kept).
#: Register caps go after warps and clusters: on the H100 a derived matmul space thinned of its caps (the order
#: before) kept 1 and 32 warps and 2-block clusters, and reached 1.126× where the declared space's cap gave 1.246×.
THINNING = (
    ("ptx_options", "the default's"),
    ("num_warps", "the three nearest the default's"),
    ("num_ctas", "the default's"),
    ("maxnreg", "none and each point's largest cap"),
    ("num_stages", "the default's and its neighbours"),
    ("maxnreg", "the default's"),
    ("constexprs", "the first combinations declared"),
)
#: Options of Triton 3.6's ``CUDAOptions`` not derived, and why (the report lists them).
LEFT_OUT = (
    ("warp_specialize", "a loop attribute in the source (tl.range(..., warp_specialize=True)), not an option"),
    ("tma", "tensor descriptors are written in the source (tl.make_tensor_descriptor, TensorDescriptor)"),
    ("persistent grid", "a tile loop in the source and a grid sized by the caller"),
    ("launch_pdl", "safe only where the kernel waits (gdc_wait) before reading its predecessor's output"),
    ("launch_cooperative_grid", "only needed for grid-wide synchronisation written in the source"),
    ("enable_fp_fusion, default_dot_input_precision, max_num_imprecise_acc_default, enable_reflect_ftz",
     "they change results; kept as recorded"),
)


class OutputCheck(Protocol):
    """The hook for constexprs shown safe by checking outputs: for each candidate (constexpr values put over the
    default's), ``(accepted, why)``: whether the kernel's outputs stay within tolerance of the default's across
    the recorded calls. :class:`kbuild.tune.level1.output_check.RecordedOutputCheck` is a recorded
    specialisation's (on a GPU of the target, else Triton's interpreter); :func:`derive_space` takes one."""

    def __call__(self, subject: Subject, candidates: Sequence[Mapping[str, Any]], /) -> Sequence[tuple[bool, str]]:
        ...


@dataclass(frozen=True)
class Dimension:
    """One derived dimension: its values (the default's first) and why they are there."""

    name: str
    values: tuple[Any, ...]
    why: str

    def as_dict(self) -> dict[str, Any]:
        return {"values": list(self.values), "why": self.why}


@dataclass(frozen=True)
class Shape:
    """What :func:`derive_space` reads of a kernel's source: its runtime loops and whether one holds a ``tl.dot``."""

    loops: int
    dot_in_loop: bool


@dataclass(frozen=True)
class DerivedSpace:
    """A derived space: the level-1 :class:`~kbuild.tune.level1.space.Space` (the default first) and how it came
    about."""

    subject: Subject
    space: Space
    dimensions: tuple[Dimension, ...]
    shape: Shape
    thinned: tuple[str, ...] = ()
    """The thinning steps taken (:data:`THINNING`), with the sizes before and after."""
    unverified: tuple[Mapping[str, Any], ...] = ()
    """Constexpr candidates an :class:`OutputCheck` would have to accept (none was given, or it refused them)."""
    shown_safe: tuple[str, ...] = ()
    """Constexprs an :class:`OutputCheck` accepted other values of: a dimension of the space (the run time may serve
    such a value to a call that asks for the default's, :func:`kbuild.declarations.space.servable_difference`)."""
    output_checks: tuple[Mapping[str, Any], ...] = ()
    """Each candidate's verdict: ``{"constexprs", "accepted", "why"}``."""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def default(self) -> Config:
        return self.space.configs[0]

    def servable_points(self, constexprs: Mapping[str, Any], num_ctas: int) -> list[dict[str, Any]]:
        """The points a call that asks for the default may be served, as declaration points (every constexpr
        stated: ``constexprs`` with the point's over them): not another ``num_ctas`` (the launcher launches clusters),
        no constexpr but those an output check showed safe (:func:`kbuild.declarations.space.servable_difference`)."""
        from kbuild.declarations.space import make_point

        return [make_point({**constexprs, **c.constexprs}, c.num_warps, c.num_stages, c.maxnreg, c.num_ctas,
                           c.ptx_options) for c in self.space.configs
                if c.num_ctas == num_ctas and set(c.constexprs) <= set(self.shown_safe)]

    def __len__(self) -> int:
        return len(self.space)

    def as_dict(self) -> dict[str, Any]:
        return {"size": len(self.space), "kind": "grid" if self.space.grid else "list",
                "default": self.default.label(), "dimensions": {d.name: d.as_dict() for d in self.dimensions},
                "loops": self.shape.loops, "dot_in_loop": self.shape.dot_in_loop, "thinned": list(self.thinned),
                "tunable_constexprs_from": self.subject.tunable_from,
                "unverified_constexprs": [dict(c) for c in self.unverified],
                "constexprs_shown_safe": list(self.shown_safe), "output_checks": [dict(c) for c in self.output_checks],
                "left_out": [{"option": o, "why": w} for o, w in LEFT_OUT], "notes": list(self.notes)}


# ----------------------------------------------------------------------------------------------
# The kernel's source


def _is_static_range(call: ast.expr) -> bool:
    return isinstance(call, ast.Call) and isinstance(call.func, (ast.Attribute, ast.Name)) and \
        (call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id) == "static_range"


def _is_dot(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return name in ("dot", "dot_scaled")


def _callees(fn: Any, tree: ast.AST) -> list[Any]:
    """The ``@triton.jit`` functions ``fn`` calls by a global name or a module attribute."""
    from triton.runtime.jit import JITCallable

    out = []
    scope = getattr(fn, "__globals__", {})
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            value: Any = None
            if isinstance(f, ast.Name):
                value = scope.get(f.id)
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                owner = scope.get(f.value.id)
                value = getattr(owner, f.attr, None) if owner is not None else None
            if isinstance(value, JITCallable):
                out.append(value)
    return out


def kernel_shape(fn: Any) -> Shape:
    """The runtime loops of a ``@triton.jit`` function and the jit functions it calls (``for`` over anything but
    ``tl.static_range``, ``while``), and whether a ``tl.dot`` sits in one."""
    loops = 0
    dot = False
    seen: set[int] = set()
    todo = [fn]
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        tree = f.parse()
        for node in ast.walk(tree):
            runtime_for = isinstance(node, ast.For) and not _is_static_range(node.iter)
            if runtime_for or isinstance(node, ast.While):
                loops += 1
                dot = dot or any(_is_dot(n) for n in ast.walk(node))
                # a jit function called inside a loop counts as in the loop too
                dot = dot or any(kernel_shape(c).dot_in_loop or _has_dot(c) for c in _callees(f, node))
        todo.extend(_callees(f, tree))
    return Shape(loops, dot)


def _has_dot(fn: Any) -> bool:
    return any(_is_dot(n) for n in ast.walk(fn.parse()))


# ----------------------------------------------------------------------------------------------
# Constexprs shown safe by checking outputs (the hook)

_BLOCK_WORDS = ("BLOCK", "TILE", "CHUNK")


def constexpr_candidates(subject: Subject) -> list[dict[str, Any]]:
    """Constexpr values that outputs could show safe: for each fixed integer constexpr that names a block
    (``BLOCK``, ``TILE``, ``CHUNK`` in its name) and is a power of two of at least 16, half and twice its value."""
    out = []
    for name, value in sorted(subject.constexprs.items()):
        if isinstance(value, bool) or not isinstance(value, int) or value < 16 or value & (value - 1):
            continue
        if not any(w in name.upper() for w in _BLOCK_WORDS):
            continue
        out.extend([{name: value // 2}, {name: value * 2}])
    return out


# ----------------------------------------------------------------------------------------------
# The space


def _with_default(values: Sequence[Any], default: Any) -> tuple[Any, ...]:
    return tuple(dict.fromkeys([default, *values]))


def register_caps(registers_per_sm: int, num_warps: int) -> tuple[int, ...]:
    """The ``maxnreg`` caps derived for a point of ``num_warps`` warps, largest first: where 1 to 4 of its blocks fit
    on an SM (:data:`MAXNREG_BLOCKS`), in units of :data:`MAXNREG_UNIT`, from :data:`MAXNREG_FLOOR` up, below 255."""
    caps = {registers_per_sm // (32 * num_warps * b) // MAXNREG_UNIT * MAXNREG_UNIT for b in MAXNREG_BLOCKS}
    return tuple(sorted((c for c in caps if MAXNREG_FLOOR <= c < 255), reverse=True))


def _nearest(values: Sequence[int], default: int, n: int) -> tuple[int, ...]:
    ranked = sorted(values, key=lambda v: (abs(math.log2(v) - math.log2(default)), v))
    return _with_default(sorted(ranked[:n]), default)


def derive_space(subject: Subject, *, max_points: int = DEFAULT_MAX_POINTS, check_outputs: OutputCheck | None = None,
                 fn: Any | None = None) -> DerivedSpace:
    """The derived space of ``subject`` on its target (see the module docstring). ``fn``: the ``@triton.jit``
    function when the caller has it (default: :meth:`~kbuild.tune.level1.subject.Source.load`)."""
    if max_points < 1:
        raise ValueError(f"max_points must be at least 1, got {max_points}")
    row = subject.target.architecture
    fn = fn if fn is not None else subject.source.load()
    shape = kernel_shape(fn)
    d = subject.default
    notes = list(subject.notes)
    recorded = subject.origin.get("source_hash")
    if recorded:
        from kbuild.compile.triton_aot import source_hash

        here = source_hash(fn)
        if here != recorded:
            notes.append(f"the kernel imported here is not the one recorded (source hash {here[:16]}, recorded "
                         f"{str(recorded)[:16]}): its module reads the machine at import; the space is compiled "
                         "from this one")
    combos: list[dict[str, Any]] = [dict(c) for c in subject.tunable] or [dict(d.constexprs)]
    candidates = constexpr_candidates(subject)
    unverified: list[Mapping[str, Any]] = []
    extra_names: list[str] = []
    checks: list[dict[str, Any]] = []
    if candidates:
        verdicts = list(check_outputs(subject, candidates)) if check_outputs is not None else \
            [(False, "no output check was run")] * len(candidates)
        for cand, (ok, why) in zip(candidates, verdicts, strict=True):
            checks.append({"constexprs": dict(cand), "accepted": bool(ok), "why": why})
            if not ok:
                unverified.append(cand)
                continue
            name = next(iter(cand))
            if name not in extra_names:
                extra_names.append(name)
            combos.extend({**c, **cand} for c in list(combos) if c.get(name, subject.constexprs.get(name)) ==
                          subject.constexprs.get(name))
    if extra_names:  # a constexpr shown safe becomes a dimension: every combination states its value
        combos = [{**{n: subject.constexprs[n] for n in extra_names}, **c} for c in combos]
        subject = _moved_to_tunable(subject, extra_names)

    axes: dict[str, tuple[Any, ...]] = {
        "num_warps": _with_default(WARPS, d.num_warps),
        "num_stages": _with_default(STAGES, d.num_stages) if shape.loops else (d.num_stages,),
        "num_ctas": _with_default(CTAS, d.num_ctas) if row.clusters and shape.dot_in_loop else (d.num_ctas,),
        "ptx_options": _with_default([None, *PTX_FLAGS], d.ptx_options),
    }
    caps_kept = "all"  # each point's register caps (they depend on its warps): all, none and the largest, the default's

    def regs(w: int) -> tuple[Any, ...]:
        caps = register_caps(row.registers_per_sm, w)
        values = (d.maxnreg,) if caps_kept == "default" else (None, *caps[:1]) if caps_kept == "largest" else \
            (None, *caps)
        return _with_default(values, d.maxnreg) if w == d.num_warps else values
    whys = {
        "num_warps": "the same program over more or fewer warps (results within rounding: reduction trees differ)",
        "num_stages": (f"pipelining depth of the kernel's {shape.loops} runtime loop(s)" if shape.loops else
                       "no runtime loop: pipelining changes no code, the default's kept"),
        "maxnreg": (f"each point's occupancy steps: the register caps at which 1 to {max(MAXNREG_BLOCKS)} of its "
                    f"blocks fit on an SM ({row.registers_per_sm} registers / (32 x warps x blocks), in units of "
                    f"{MAXNREG_UNIT}, {MAXNREG_FLOOR} to 254)"),
        "num_ctas": ("thread block clusters (a tl.dot in a loop, and clusters on this architecture)"
                     if len(axes["num_ctas"]) > 1 else "no tl.dot in a loop, or no clusters here: the default's kept"),
        "ptx_options": "ptxas flags that keep the arithmetic (register-usage level 10 against ptxas's 5)",
    }
    thinned: list[str] = []

    def size() -> int:
        others = math.prod(len(v) for k, v in axes.items() if k != "num_warps")
        return len(combos) * others * sum(len(regs(w)) for w in axes["num_warps"])

    for dim, kept in THINNING:
        if size() <= max_points:
            break
        before = size()
        if dim == "ptx_options":
            axes[dim] = (d.ptx_options,)
        elif dim == "maxnreg":
            caps_kept = "largest" if kept.startswith("none") else "default"
        elif dim == "num_stages":
            axes[dim] = tuple(s for s in axes[dim] if abs(s - d.num_stages) <= 1)
        elif dim == "num_warps":
            axes[dim] = _nearest(axes[dim], d.num_warps, 3)
        elif dim == "num_ctas":
            axes[dim] = (d.num_ctas,)
        else:
            per = math.prod(len(v) for v in axes.values())
            combos = combos[:max(1, max_points // per)]
        if size() < before:
            thinned.append(f"{dim}: {kept} ({before} -> {size()} points)")
    configs = [Config(dict(c), w, s, r, n, x) for c, w, s, n, x in itertools.product(
        combos, axes["num_warps"], axes["num_stages"], axes["num_ctas"], axes["ptx_options"]) for r in regs(w)]
    all_regs = _with_default(sorted({r for w in axes["num_warps"] for r in regs(w) if r is not None}, reverse=True),
                             None)
    shown = {**axes, "maxnreg": _with_default(all_regs, d.maxnreg)}
    dims = [Dimension(name, shown[name], whys[name])
            for name in ("num_warps", "num_stages", "maxnreg", "num_ctas", "ptx_options")]
    if len(combos) > 1:
        why = f"declared tunable ({subject.tunable_from})" if not extra_names else \
            f"declared tunable or shown safe by an output check ({', '.join(extra_names)})"
        dims.insert(0, Dimension("constexprs", tuple(combos), why))
    if unverified:
        notes.append(f"{len(unverified)} constexpr value(s) left out until an output check shows them safe")
    return DerivedSpace(subject, Space.of(configs), tuple(dims), shape, tuple(thinned), tuple(unverified),
                        notes=tuple(notes), shown_safe=tuple(extra_names), output_checks=tuple(checks))


def _moved_to_tunable(subject: Subject, names: Sequence[str]) -> Subject:
    import dataclasses

    cx = {n: v for n, v in subject.constexprs.items() if n not in names}
    default = dataclasses.replace(subject.default, constexprs={**{n: subject.constexprs[n] for n in names},
                                                               **subject.default.constexprs})
    return dataclasses.replace(subject, constexprs=cx, default=default)

__all__ = ["CTAS", "DEFAULT_MAX_POINTS", "LEFT_OUT", "MAXNREG_BLOCKS", "MAXNREG_FLOOR", "MAXNREG_UNIT", "PTX_FLAGS",
           "STAGES", "THINNING", "WARPS", "DerivedSpace", "Dimension", "OutputCheck", "Shape", "constexpr_candidates",
           "derive_space", "kernel_shape", "register_caps"]
