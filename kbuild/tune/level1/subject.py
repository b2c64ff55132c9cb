"""What a derived space is derived for: one kernel specialisation on one target, from a recording or a bench spec.

A :class:`Subject` holds what compiling a point of the kernel's space needs, as plain, picklable data (a compile
process rebuilds the ``@triton.jit`` function from :class:`Source`): the runtime signature, the constexprs no
point changes, the configuration the workload ran (the *default*: its launch options and the constexprs declared
tunable), the constexpr combinations declared tunable, and the Triton options that are not launch options (kept
as recorded: they can change results).

* :func:`from_recording`: a specialisation of a ``kbuild record`` recording (:mod:`kbuild.record`). Constexprs are
  *declared tunable* when the kernel was called through ``@triton.autotune``: its configs' ``kwargs`` (each
  combination the author listed, not their cross product); ``@triton.heuristics`` values computed below the
  autotuner are taken from the recorded specialisation of that combination (a combination none was recorded for
  is left out, with a note). :func:`pick_specialization` chooses the one to derive for: the most called on the
  target.
* :func:`from_bench`: a bench spec (:mod:`kbuild.bench.spec`); its autotune list (``configs``) declares the
  tunable constexpr combinations, followed, where the spec has a reference of its own (torch: any configuration's
  output can be judged), by the other pairings of the values the list holds (:func:`crossed_values`, at most
  :data:`MAX_CROSSED` combinations in all). Its ``space``, a declared space, is not read: this is the path for a
  kernel with none.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kbuild.bench.spec import Config
from kbuild.errors import UsageError
from kbuild.record.format import LAUNCH_OPTIONS, Kernel, Recording, Specialization
from kbuild.targets import Target, parse_target

#: Fields of Triton's parsed options a compile does not take from a recording: a path (``extern_libs``; Triton
#: fills in its own libdevice), the target (``arch``) and what ``parse_options`` derives from it, and the
#: environment (``triton_env``, reported instead).
_NOT_PASSED = ("extern_libs", "arch", "triton_env", "supported_fp8_dtypes", "deprecated_fp8_dot_operand_dtypes",
               "max_num_imprecise_acc_default", "backend_name", "warp_size")


@dataclass(frozen=True)
class Source:
    """Where a process finds the kernel's ``@triton.jit`` function: ``module:qualname`` (an ``@triton.autotune`` or
    ``@triton.heuristics`` object over it is unwrapped), or a bench spec's reference (``bench``)."""

    module: str = ""
    qualname: str = ""
    bench: str = ""
    small: bool = False
    python_path: tuple[str, ...] = ()

    def load(self) -> Any:
        """The ``@triton.jit`` function (imported here; a :class:`UsageError` naming what cannot be imported)."""
        from kbuild import usercode
        from kbuild.compile.triton_aot import unwrap

        if self.bench:
            from kbuild.bench.spec import load_spec

            return load_spec(self.bench, small=self.small, python_path=self.python_path).fn
        what = f"{self.module}:{self.qualname}"
        module = usercode.import_module(self.module, error=lambda m: UsageError(f"kernel {what}: {m}"),
                                        paths=self.python_path)
        obj: Any = module
        for part in self.qualname.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                raise UsageError(f"kernel {what}: module {self.module!r} has no attribute {self.qualname!r}")
        try:
            return unwrap(obj).jit
        except ValueError as exc:
            raise UsageError(f"kernel {what}: not a @triton.jit function: {exc}") from None

    @property
    def label(self) -> str:
        return self.bench or f"{self.module}:{self.qualname}"


@dataclass(frozen=True)
class Subject:
    """One kernel specialisation on one target, as a derived space needs it (see the module docstring)."""

    name: str
    """What reports call it: ``module:qualname`` (a recording) or the bench spec's name."""
    source: Source
    target: Target
    signature: Mapping[str, str]
    """Every runtime parameter's type in the declaration grammar (:mod:`kbuild.declarations.signature`)."""
    constexprs: Mapping[str, Any]
    """The constexprs no point of the space changes (declaration form: a dtype is ``{"dtype": "fp16"}``)."""
    default: Config
    """The configuration the workload ran (a recording) or ships untuned (a bench spec): the launch options, and
    the values of the constexprs declared tunable."""
    tunable: tuple[Mapping[str, Any], ...] = ()
    """The constexpr combinations declared tunable, the default's first; empty: none."""
    tunable_from: str | None = None
    """What declared them (``"@triton.autotune configs"``, ``"bench spec configs"``)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Triton options that are not launch options, as recorded (``enable_fp_fusion``, ...), passed to every point's
    compile unchanged."""
    origin: Mapping[str, Any] = field(default_factory=dict)
    """Where it came from, for the report (recording file, specialisation id, calls, source hash)."""
    notes: tuple[str, ...] = ()

    def all_constexprs(self, config: Config) -> dict[str, Any]:
        return {**self.constexprs, **config.constexprs}


def pick_specialization(kernel: Kernel, target: Target) -> Specialization | None:
    """The specialisation of ``kernel`` to derive a space for on ``target``: the one the workload called most
    (ties: the smallest id), among those a declaration can hold; None when there is none."""
    specs = [s for s in kernel.specializations.values() if s.target == target.name and s.unsupported is None]
    return min(specs, key=lambda s: (-s.calls, s.id)) if specs else None


def _options_of(recording: Recording, spec: Specialization) -> tuple[dict[str, Any], list[str]]:
    recorded = recording.compiler_options[spec.compiler_options]
    notes = []
    if recorded.get("triton_env"):
        notes.append("recorded with Triton environment variables that change code "
                     f"({', '.join(sorted(recorded['triton_env']))}); compiled here without them")
    out = {k: _frozen(v) for k, v in recorded.items()
           if k not in _NOT_PASSED and k not in LAUNCH_OPTIONS and v is not None}
    return out, notes


def _frozen(value: Any) -> Any:
    """Lists as tuples: Triton's options are a frozen dataclass, hashed by its compile caches."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _launch_config(options: Mapping[str, Any], constexprs: Mapping[str, Any]) -> Config:
    return Config(dict(constexprs), int(options.get("num_warps") or 4), int(options.get("num_stages") or 3),
                  options.get("maxnreg") or None, int(options.get("num_ctas") or 1), options.get("ptx_options") or None)


def from_recording(recording: Recording, kernel: Kernel, spec: Specialization, *, where: str = "recording"
                   ) -> Subject:
    """The subject of one recorded specialisation (see the module docstring)."""
    if spec.unsupported is not None:
        raise UsageError(f"{where}: {kernel.function} specialisation {spec.id}: cannot be compiled from its "
                         f"declaration ({spec.unsupported})")
    target = parse_target(spec.target)
    options, notes = _options_of(recording, spec)
    names: list[str] = []
    combos: list[dict[str, Any]] = []
    tunable_from = None
    if kernel.autotune is not None:
        names = list(dict.fromkeys(n for c in kernel.autotune["configs"] for n in c["kwargs"]))
        inside = [n for n, place in sorted(kernel.heuristics.items()) if place == "inside"]
        varied = [*names, *(n for n in inside if n not in names)]
        default_combo = {n: spec.constexprs[n] for n in varied if n in spec.constexprs}
        combos = [default_combo]
        for i, c in enumerate(kernel.autotune["configs"]):
            combo = {n: c["kwargs"][n] for n in names if n in c["kwargs"]}
            if inside:  # the heuristics' values for this combination: from its recorded specialisation
                seen = [s for s in kernel.specializations.values() if s.signature == spec.signature
                        and s.target == spec.target and all(s.constexprs.get(n) == v for n, v in combo.items())]
                if not seen:
                    notes.append(f"autotune config {i} ({combo}) left out: @triton.heuristics below the autotuner "
                                 f"({', '.join(inside)}) compute values from it that no recorded specialisation shows")
                    continue
                combo = {n: seen[0].constexprs[n] for n in varied if n in seen[0].constexprs}
            if combo not in combos and set(combo) == set(default_combo):
                combos.append(combo)
        names = list(default_combo)
        tunable_from = "@triton.autotune configs"
    fixed = {n: v for n, v in spec.constexprs.items() if n not in names}
    default = _launch_config(spec.options, {n: spec.constexprs[n] for n in names})
    origin = {"kernel": kernel.function, "specialization": spec.id, "calls": spec.calls,
              "source_hash": kernel.source_hash, "autotuned": kernel.autotune is not None}
    return Subject(name=kernel.function, source=Source(module=kernel.module, qualname=kernel.qualname),
                   target=target, signature=dict(spec.signature), constexprs=fixed, default=default,
                   tunable=tuple(combos) if len(combos) > 1 else (), tunable_from=tunable_from if len(combos) > 1 else None,
                   options=options, origin=origin, notes=tuple(notes))


def from_bench(spec: Any, target: Target, *, python_path: Sequence[str] = ()) -> Subject:
    """The subject of a bench spec (:class:`kbuild.bench.spec.BenchSpec` loaded by its reference) on ``target``."""
    if not spec.ref:
        raise UsageError(f"bench spec {spec.name}: a derived space compiles in other processes, which import the "
                         "spec by its reference (package.module:callable); load it with kbuild.bench.spec.load_spec")
    combos: list[dict[str, Any]] = []
    for c in spec.configs:
        if dict(c.constexprs) not in combos:
            combos.append(dict(c.constexprs))
    listed = len(combos)
    tunable_from = "bench spec configs"
    crossed = crossed_values(combos) if spec.independent_reference else []
    if crossed:
        combos.extend(crossed)
        tunable_from = (f"bench spec configs ({listed}), then {len(crossed)} more crossing their values (every "
                        "candidate's output is checked against the spec's own reference)")
    default = spec.configs[0]
    return Subject(name=spec.name, source=Source(bench=spec.ref, python_path=tuple(python_path)), target=target,
                   signature=dict(spec.signature), constexprs=dict(spec.constexprs), default=default,
                   tunable=tuple(combos) if len(combos) > 1 else (),
                   tunable_from=tunable_from if len(combos) > 1 else None,
                   origin={"bench": spec.ref})


#: At most this many combinations a bench spec's listed constexpr values are crossed into (more: none are added).
MAX_CROSSED = 16


def crossed_values(combos: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The combinations of the values each constexpr takes somewhere in ``combos`` (an autotune list) that the list
    does not hold, in the order of first appearance; none when the cross product exceeds :data:`MAX_CROSSED` or the
    combinations name different constexprs. A list states the values its author found worth trying, rarely every
    pairing of them: the H200's best 512×512×2048 matmul paired the list's BLOCK_K of 128 with another entry's
    BLOCK_M of 64."""
    if len(combos) < 2 or any(set(c) != set(combos[0]) for c in combos):
        return []
    names = list(combos[0])
    values = [list(dict.fromkeys(c[n] for c in combos)) for n in names]
    if math.prod(len(v) for v in values) > MAX_CROSSED:
        return []
    pairings = (dict(zip(names, vs, strict=True)) for vs in itertools.product(*values))
    return [c for c in pairings if c not in combos]


def find_kernels(recording: Recording, names: Sequence[str] | None, *, where: str) -> list[Kernel]:
    """The recording's kernels named by ``names`` (a function ``module:qualname`` or its ``name``; every kernel
    when None), in the recording's order; a :class:`UsageError` naming an unknown one and the known ones."""
    kernels = sorted(recording.kernels.values(), key=Kernel.sort_key)
    if not names:
        return kernels
    out: list[Kernel] = []
    for name in names:
        found = [k for k in kernels if name in (k.function, k.name, k.qualname)]
        if not found:
            known = ", ".join(sorted({k.name for k in kernels}))
            raise UsageError(f"{where}: no recorded kernel {name!r}; recorded: {known}")
        out.extend(k for k in found if k not in out)
    return out


__all__ = ["MAX_CROSSED", "Source", "Subject", "crossed_values", "find_kernels", "from_bench", "from_recording",
           "pick_specialization"]
