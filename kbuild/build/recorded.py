"""Recordings as declarations: every specialisation ``kbuild record`` saw, a kernel entry for every target.

``[tool.kbuild] recordings = ["kbuild-recording.json"]`` names recordings (:mod:`kbuild.record`; paths relative to
``pyproject.toml``). The build (:func:`kbuild.build.pipeline.run_pipeline`) takes them beside
``[[tool.kbuild.kernels]]``:

1. **read** (:func:`load_recordings`): a missing file, another format or version, an unknown field is one error
   naming the file and the JSON path (:func:`kbuild.record.format.load`);
2. **declare** (:func:`declarations`): each recorded specialisation a declaration can express becomes a
   :class:`~kbuild.declarations.kernel.KernelSettings` (its signature, constexprs, warps, stages, CTAs, registers
   and ptxas options as recorded; ``name`` the function's name and 8 hex digits of the declaration's content), one
   per distinct declaration whatever target it was recorded for; it is built for every target of the project.
   A specialisation recorded for a target the project does not build, and one no declaration can express
   (``unsupported``), is reported;
3. **resolve** (:func:`resolve_recorded`): each kernel is imported (a module that cannot be, or that lacks the
   function, is an error naming ``kernels[i].module`` / ``.qualname``). Where this machine's import gives another
   ``source_hash`` than recorded (a package that probes the hardware at import), the module-level values the
   recording kept are set back (:func:`kbuild.compile.folded.imported_as`) for keying and compiling; where that
   does not give the recorded hash, the kernel's entries are not built and the report says which value
   differs. Each entry's keys are the build's (:func:`kbuild.build.resolve.kernel_keys`); on each target it was
   recorded for, the key the run time computes for the recorded call
   (:func:`kbuild.record.format.call_specialization`) must be that key, else the entry is not built and the
   report names the key components that differ. Values derived from the SM count are recomputed for each target's
   GPU (:func:`kbuild.record.machine.on_other_gpu`) and what the recording does not cover there is reported;
4. **choose** (:mod:`kbuild.build.choices`): an autotuned kernel's entries carry, per target, the tuning key whose
   choice their configuration is; where the build tunes (``tune`` not ``off``), a plain ``@triton.jit`` kernel
   recorded for a target gets a bench spec made from its recorded call and a space derived from what cannot change
   its results (:func:`_tunable`), so that the tune phase (a GPU of the target here, or ``kbuild prewarm``) tunes it
   like a declared kernel, and the package data serves the choice to the recorded call (``serves_call``);
5. **collapse** (:func:`collapse`): a recorded entry whose baseline key a hand-written one has (or another recorded
   one) is built once, as the first.

What was done and what was not is the :class:`RecordingReport` (the build prints its lines; ``--json`` has it).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbuild.canonical import canonical_json
from kbuild.compile import source_hash
from kbuild.compile.triton_aot import project_on_path, unwrap
from kbuild.declarations.kernel import KernelSettings
from kbuild.errors import ConfigError, KernelSourceError
from kbuild.key import tuner_component
from kbuild.record.format import (
    Kernel,
    Recording,
    Specialization,
    call_specialization,
    content_id,
    load,
    merge,
)
from kbuild.runtime.lookup import key_differences
from kbuild.settings.model import Settings
from kbuild.targets import Target

from .choices import Choice, Question, choose, fits, sources_for
from .kernel_build import KernelBuild, RecordedBuild
from .resolve import kernel_keys, source_distribution, toolchain_versions


@dataclass
class RecordingReport:
    """What the build made of its recordings, for people (:attr:`lines`) and ``--json`` (:meth:`as_json`)."""

    recordings: list[str] = field(default_factory=list)
    specializations: int = 0
    """Specialisations in the recordings (a specialisation recorded for two targets counts twice)."""
    declarations: int = 0
    """Distinct declarations they make (each built for every target)."""
    built: int = 0
    """Kernel × target entries built from them, after :func:`collapse`."""
    collapsed: int = 0
    """Kernel × target entries a hand-written declaration (or another recorded one) builds already."""
    not_built: int = 0
    """Declarations left out (the report's lines say why)."""
    lines: list[str] = field(default_factory=list)
    loaded: list[tuple[str, Recording]] = field(default_factory=list, repr=False)
    """The recordings read (what :func:`coverage_lines` checks a written index against)."""

    def say(self, line: str) -> None:
        if line not in self.lines:
            self.lines.append(line)

    def as_json(self) -> dict[str, Any]:
        return {"recordings": self.recordings, "specializations": self.specializations,
                "declarations": self.declarations, "built": self.built, "collapsed": self.collapsed,
                "not_built": self.not_built, "lines": self.lines}


@dataclass
class Declared:
    """One declaration made from recorded specialisations (the same one recorded for several targets or in several
    recordings)."""

    spec: KernelSettings
    kernel: Kernel
    recording: Recording
    """The recordings merged (:func:`kbuild.record.format.merge`; the one recording itself when there is one): its
    ``compiler_options`` table resolves the recorded specialisations, its kernel holds every recording's tunings."""
    recorded: dict[str, Specialization] = field(default_factory=dict)
    """Target name → the specialisation recorded for it (of :attr:`recording`)."""
    files: list[str] = field(default_factory=list)
    kernel_at: tuple[str, str] = ("", "")
    """``(file, "kernels[i]")`` of its kernel in the first recording."""


# ----------------------------------------------------------------------------------------------
# Reading and declaring


def load_recordings(settings: Settings) -> list[tuple[str, Recording]]:
    """Each recording the settings name, read and checked: ``(name as given, recording)``. A file that is missing
    or not a recording is one error naming it (and the JSON path)."""
    out = []
    for i, name in enumerate(settings.recordings):
        path = settings.project_path(name)
        if not path.is_file():
            raise ConfigError(settings.config_file, f"recordings[{i}]",
                              f"{name}: no such recording (make one with kbuild record --out {name} -- COMMAND)")
        out.append((name, load(str(path), where=name)))
    return out


def _declared_type(ty: str) -> str:
    return "".join(ty.split())


def entry_stem(function_name: str) -> str:
    """The stem of a recorded entry's name: the function's name with runs of underscores made one and none at
    either end (``_dyt_fwd_kernel`` → ``dyt_fwd_kernel``), so that the C names the build derives from it
    (``kbuild_<name>``) are never reserved identifiers (a double underscore, or an underscore and a capital)."""
    import re

    return re.sub(r"_+", "_", function_name).strip("_") or "kernel"


def declarations(recordings: Sequence[tuple[str, Recording]], targets: Sequence[Target],
                 report: RecordingReport) -> list[Declared]:
    """The declarations the recorded specialisations make, each once (in the recordings' order)."""
    from kbuild.declarations.signature import SignatureError, check_constexpr_value, parse_type

    built = {t.name for t in targets}
    # One recording of them all, so that a kernel in two recordings is one kernel (its tunings united) and each
    # specialisation resolves through the table of compiler options that holds it.
    merged = recordings[0][1] if len(recordings) == 1 else merge([rec for _, rec in recordings])
    out: dict[bytes, Declared] = {}
    elsewhere: dict[str, int] = {}
    for file, rec in recordings:
        for kernel in rec.in_order():
            for spec in kernel.in_order():
                report.specializations += 1
                at = rec.path_of(kernel, spec)
                if spec.target not in built:
                    elsewhere[spec.target] = elsewhere.get(spec.target, 0) + 1
                problem = spec.unsupported
                if problem is None and not kernel.qualname.isidentifier():
                    problem = f"{kernel.qualname!r} is not a module-level function"
                if problem is None:
                    try:
                        for ty in spec.signature.values():
                            parse_type(ty)
                        for value in spec.constexprs.values():
                            check_constexpr_value(value, recorded=True)
                    except (SignatureError, ValueError) as exc:
                        problem = str(exc)
                if problem is not None:
                    report.say(f"{file}: {kernel.function}: {at} is not built: {problem}")
                    continue
                options = spec.options
                decl = {"kernel": kernel.identity(), "signature": {n: _declared_type(t) for n, t in
                                                                    spec.signature.items()},
                        "constexprs": spec.constexprs, "options": options}
                ident = canonical_json(decl)
                kernel_here = merged.kernels[canonical_json(kernel.identity())]
                held = out.get(ident)
                if held is None:
                    name = f"{entry_stem(kernel.name)}_{content_id(decl)[:8]}"
                    ks = KernelSettings(
                        name=name, source=f"{kernel.module}:{kernel.qualname}", signature=decl["signature"],
                        constexprs=dict(spec.constexprs), num_warps=int(options.get("num_warps", 4)),
                        num_stages=int(options.get("num_stages", 3)), maxnreg=options.get("maxnreg") or None,
                        num_ctas=int(options.get("num_ctas", 1)), ptx_options=str(options.get("ptx_options") or ""),
                        recorded=(file, rec.path_of(kernel)))
                    held = out[ident] = Declared(ks, kernel_here, merged, kernel_at=(file, rec.path_of(kernel)))
                held.recorded.setdefault(spec.target, kernel_here.specializations[spec.id])
                if file not in held.files:
                    held.files.append(file)
    for target, n in sorted(elsewhere.items()):
        report.say(f"{n} specialisation(s) recorded for {target}, which this project does not build "
                   f"(targets: {', '.join(t.name for t in targets)}): each is built for the project's targets")
    report.declarations = len(out)
    return list(out.values())


# ----------------------------------------------------------------------------------------------
# Resolving


@dataclass
class _Imported:
    """One recorded kernel imported here, as the recording machine imported it."""

    jit: Any
    autotuner: Any
    source_hash: str
    imported_as: dict[str, Any]
    changed: list[str]
    distribution: dict[str, str] | None


def _import(settings: Settings, d: Declared) -> Any:
    """The object ``module:qualname`` names (a ``@triton.jit`` function, or layers over one); an error naming the
    recording's key when the module cannot be imported or lacks it."""
    from kbuild import usercode

    file, at = d.kernel_at
    kernel = d.kernel
    with project_on_path(settings):
        module = usercode.import_module(kernel.module, error=lambda m: KernelSourceError(file, f"{at}.module", m),
                                        hint=f"; the project root and {settings.python_path} are on the path")
    obj = getattr(module, kernel.qualname, None)
    if obj is None:
        raise KernelSourceError(file, f"{at}.qualname", f"module {kernel.module!r} has no {kernel.qualname!r}")
    try:
        layers = unwrap(obj)
    except ValueError as exc:
        raise KernelSourceError(file, f"{at}.qualname", f"{kernel.function} is not a @triton.jit function (or "
                                                        f"@triton.autotune / @triton.heuristics over one): {exc}") from None
    if layers.jit.fn.__name__ != kernel.name:
        raise KernelSourceError(file, f"{at}.name", f"{kernel.function} is named {layers.jit.fn.__name__!r} here, "
                                                    f"{kernel.name!r} in the recording")
    return layers


def _top_level_importable(settings: Settings, module: str) -> bool:
    """Whether ``module``'s top-level package can be found here (the project's path first): a recorded kernel of a
    module that is not (a test file's own kernel) is reported and left out; one whose package is here but the
    module is not stays an error (a stale recording, a typo)."""
    import importlib.util

    with project_on_path(settings):
        try:
            return importlib.util.find_spec(module.partition(".")[0]) is not None
        except (ImportError, ValueError):
            return False


def resolve_recorded(settings: Settings, declared: Sequence[Declared], targets: Sequence[Target],
                     report: RecordingReport) -> list[KernelBuild]:
    """Every declaration × target keyed (see the module docstring), or left out with the reason in ``report``.
    Errors (exit status 2) for a kernel that cannot be imported."""
    from kbuild.compile.folded import ImportMismatch, differences, imported_as, snapshot
    from kbuild.tune import TUNER_VERSION

    tools = toolchain_versions()
    tuner = tuner_component(settings, version=TUNER_VERSION) if settings.tune != "off" else None
    sources = sources_for(settings)
    by_kernel: dict[bytes, list[Declared]] = {}
    for d in declared:
        by_kernel.setdefault(canonical_json(d.kernel.identity()), []).append(d)
    builds: list[KernelBuild] = []
    for group in by_kernel.values():
        first = group[0]
        kernel = first.kernel
        if kernel.distribution is None and not _top_level_importable(settings, kernel.module):
            report.say(f"{kernel.function}: {len(group)} recorded specialisation(s) not built: {kernel.module!r} is "
                       "neither a module of this project nor of an installed distribution (a kernel the workload "
                       "defines itself, such as a test file's)")
            report.not_built += len(group)
            continue
        layers = _import(settings, first)
        jit = layers.jit
        here = source_hash(jit)
        patches: dict[str, Any] = {}
        changed: list[str] = []
        problem = None
        if here != kernel.source_hash:
            if not kernel.globals:
                problem = (f"recorded source hash {kernel.source_hash[:16]}, this build sees {here[:16]}, and the "
                           "recording keeps no module-level values to set back (re-record with this kbuild)")
            else:
                mismatch = None
                try:
                    with imported_as(jit, kernel.globals) as changed:
                        there = source_hash(jit)
                except ImportMismatch as exc:
                    there, mismatch = "", str(exc)
                if there == kernel.source_hash:
                    patches = dict(kernel.globals)
                else:
                    why = differences(kernel.globals, snapshot(jit))
                    if mismatch is not None:
                        why.append(f"cannot be set back: {mismatch}")
                    elif why:
                        why.append("set back, they still do not give the recorded hash: the kernel's source changed "
                                   "since the recording")
                    else:
                        why = ["no module-level value differs: the kernel's source changed since the recording"]
                    problem = (f"recorded source hash {kernel.source_hash[:16]}, this build sees {here[:16]}: "
                               + "; ".join(why))
        if problem is not None:
            targets_recorded = sorted({t for d in group for t in d.recorded})
            report.say(f"{kernel.function}: {len(group)} recorded specialisation(s) not built "
                       f"(recorded on {', '.join(targets_recorded)}): {problem}")
            report.not_built += len(group)
            continue
        setup: contextlib.AbstractContextManager[Any] = (imported_as(jit, patches) if patches
                                                         else contextlib.nullcontext())
        with setup:
            shash = source_hash(jit)
            imported = _Imported(jit, layers.autotuner, shash, patches, changed,
                                 source_distribution(first.spec, jit))
            if patches:
                report.say(f"{kernel.function}: imported as on the recording machine ({'; '.join(changed)}); "
                           f"on a target GPU the recording was not made on, its import may differ again")
            if kernel.distribution != imported.distribution:
                report.say(f"{kernel.function}: recorded from {_dist(kernel.distribution)}, this build keys "
                           f"{_dist(imported.distribution)}")
            choices = _Choices(kernel, imported, targets, sources, report)
            for d in group:
                builds.extend(_builds_of(settings, d, imported, targets, tools, tuner, choices, report))
    return builds


def _dist(dist: dict[str, str] | None) -> str:
    return f"{dist['name']} {dist['version']}" if dist else "the project's own module"


def _builds_of(settings: Settings, d: Declared, imported: _Imported, targets: Sequence[Target], tools: dict[str, str],
               tuner: dict[str, Any] | None, choices: _Choices, report: RecordingReport) -> list[KernelBuild]:
    """One declaration's builds, one per target; none when a target it was recorded for keys the call otherwise."""
    out = []
    for target in targets:
        spec, space, derivation = _tunable(settings, d, target, imported, tuner, report)
        derived, check = derivation if derivation is not None else (None, None)
        baseline, tuned = kernel_keys(spec, target, imported.source_hash, tools, _keyed(tuner, derived), space,
                                      imported.distribution)
        recorded = d.recorded.get(target.name)
        if recorded is not None:
            call = call_specialization(d.recording, d.kernel, recorded)
            if call.triton_version != tools["triton_version"]:
                report.say(f"{d.kernel.function}: recorded with Triton {call.triton_version}, built with "
                           f"{tools['triton_version']}")
                call = dataclasses.replace(call, triton_version=tools["triton_version"])
            mine = call.key(ptxas_version=tools["ptxas_version"], declared=spec.signature,
                            distribution=imported.distribution)
            if mine.hex != baseline.hex:
                diffs = key_differences(mine.components, baseline.components, theirs_are="build")
                report.say(f"{d.files[0]}: {d.kernel.function} ({spec.name}) is not built: on {target.name} the "
                           f"recorded call keys otherwise than its declaration ({'; '.join(diffs[:3])})")
                report.not_built += 1
                return []
        notes = _machine_notes(d, target)
        for line in notes:
            report.say(f"{d.kernel.function} ({spec.name}) on {target.name}: not covered: {line}")
        chosen, source, chose_notes = choices.of(d, target)
        out.append(KernelBuild(spec=spec, target=target, baseline_key=baseline, tuned_key=tuned, fn=imported.jit,
                               space=space, recorded=RecordedBuild(
                                   recordings=tuple(d.files), imported_as=imported.imported_as,
                                   autotuned=d.kernel.autotune is not None,
                                   autotune_key=chosen[0] if chosen else None,
                                   also_keys=tuple(tuple(k) for k in (chosen or [])[1:]),
                                   choice=source, notes=tuple(chose_notes), derived=derived,
                                   output_check=check)))
    return out


def _tunable(settings: Settings, d: Declared, target: Target, imported: _Imported, tuner: dict[str, Any] | None,
             report: RecordingReport) -> tuple[KernelSettings, list[dict[str, Any]], Any]:
    """The declaration as the tune phase takes it on ``target``, and the configuration space its tuned key names.

    Where the build tunes (``tune`` is not ``off``), a plain ``@triton.jit`` kernel recorded for ``target`` gets a
    bench spec made from its recorded call (:func:`kbuild.bench.recorded.recorded_ref`: inputs from the recorded
    shapes, the recorded configuration's own output as the reference) and a space derived from what cannot change
    its results (:func:`kbuild.tune.level1.derive.derive_space`; pruning by ptxas is the tune phase's). What it
    chooses ships to calls that ask for the recorded configuration (``serves_call``, issue 35 part 3). An
    ``@triton.autotune`` kernel keeps its autotuner's choices (:mod:`kbuild.build.choices`); elsewhere the
    default alone. The third value is None where no space is derived, else ``(derived space, output check)``: the
    tune phase runs the check (:class:`kbuild.tune.level1.output_check.RecordedOutputCheck`; None when the kernel
    has no block size to check) and prunes the space it gives; the build's space and key are those before it."""
    spec, default = d.spec, [d.spec.default_config()]
    recorded = d.recorded.get(target.name)
    if tuner is None or d.kernel.autotune is not None or recorded is None or spec.bench:
        return spec, default, None
    from kbuild.bench.recorded import recorded_ref
    from kbuild.tune.level1.derive import derive_space
    from kbuild.tune.level1.output_check import RecordedOutputCheck
    from kbuild.tune.level1.subject import from_recording

    path = settings.project_path(d.files[0])
    try:  # the output check of block sizes runs where the space is searched (the tune phase), not here
        derived = derive_space(from_recording(d.recording, d.kernel, recorded, where=d.files[0]), fn=imported.jit)
    except Exception as exc:  # a kernel the derivation cannot read ships its recorded configuration
        report.say(f"{d.kernel.function} ({spec.name}) on {target.name}: not tuned: no space could be derived "
                   f"({type(exc).__name__}: {exc})")
        return spec, default, None
    ref = recorded_ref(path, d.kernel.function, recorded.id, target=target.name)
    check = RecordedOutputCheck(path, d.kernel, recorded, target=target.name) if derived.output_checks else None
    return dataclasses.replace(spec, bench=ref), derived.servable_points(spec.constexprs, spec.num_ctas), \
        (derived, check)


def _keyed(tuner: dict[str, Any] | None, derived: Any) -> dict[str, Any] | None:
    """The tuner component of the tuned key: with the block sizes proposed to the output check, whatever its
    verdicts (which depend on where the tune phase runs it: a GPU of the target checks the recorded sizes, a CPU
    only what Triton's interpreter can run), so that the key names the question and a CPU build finds what a GPU
    prewarm tuned for the same kernel."""
    if derived is None or tuner is None or not derived.output_checks:
        return tuner
    return {**tuner, "constexpr_candidates": [dict(c["constexprs"]) for c in derived.output_checks]}


def _machine_notes(d: Declared, target: Target) -> list[str]:
    """What the recorded calls of this declaration become on a GPU of ``target`` (its SM count from
    :mod:`kbuild.arch`), where they follow the SM count (:func:`kbuild.record.machine.on_other_gpu`)."""
    from kbuild.arch import find
    from kbuild.record.machine import on_other_gpu

    row = find(target.cc)
    if row is None or row.part is None:
        return []
    out: list[str] = []
    for spec in d.recorded.values():
        for line in on_other_gpu(spec.samples, spec.constexprs, spec.signature, row.part.sms):
            if line not in out:
                out.append(f"{line} ({row.part.name}): record on such a GPU")
    return out


# ----------------------------------------------------------------------------------------------
# Autotune choices


class _Choices:
    """The choices of one autotuned kernel's tuning keys, per target, and which declaration carries each."""

    def __init__(self, kernel: Kernel, imported: _Imported, targets: Sequence[Target], sources: Sequence[Any],
                 report: RecordingReport) -> None:
        self.kernel, self.imported = kernel, imported
        self.answers: dict[tuple[str, bytes], tuple[tuple[Any, ...], Choice | None, tuple[int, ...]]] = {}
        self.described: dict[str, Any] = {}
        """This import's ``@triton.autotune`` as the recording format describes it."""
        self.usable = self._usable(report)
        if not self.usable:
            return
        recorded = (kernel.autotune or {}).get("configs")
        if self.described["configs"] != recorded:
            # The package picks its configurations at import from the hardware (fla's BS_LIST from the GPU's shared
            # memory). A measured choice is an index into the recorded list and its cubin is compiled from the
            # recording, so it still ships; the run time gives it only to an autotuner that holds that configuration
            # (kbuild.runtime.lookup.autotune_choices); a Triton autotune cache cannot be named from this import.
            report.say(f"{kernel.function}: its @triton.autotune configurations here differ from the recorded ones "
                       f"({len(self.described['configs'])} here, {len(recorded or ())} recorded, not the "
                       "same: the package chooses them at import, from the hardware): the choices the recording "
                       "measured ship (the run time gives each only to an autotuner that holds its configuration); "
                       "Triton's autotune cache is not asked")
        keys: dict[bytes, tuple[tuple[Any, ...], tuple[int, ...]]] = {}
        for t in kernel.tunings:
            ident = canonical_json(t["key"])
            configs = tuple(t["configs"])
            if ident not in keys or len(configs) > len(keys[ident][1]):
                keys[ident] = (tuple(t["key"]), configs)
        for target in targets:
            unchosen = []
            for ident, (key, configs) in sorted(keys.items()):
                q = Question(kernel, target, key, configs, imported.autotuner, imported.jit)
                found = choose(sources, q)
                self.answers[(target.name, ident)] = (key, found, configs)
                if found is None:
                    unchosen.append(key)
                else:
                    report.say(f"{kernel.function} on {target.name}: key {list(key)}: config {found.config} "
                               f"({found.source}: {found.detail})")
            if unchosen:
                report.say(f"{kernel.function} on {target.name}: no autotune choice for {len(unchosen)} key(s) "
                           f"({', '.join(str(list(k)) for k in unchosen[:3])}{', ...' if len(unchosen) > 3 else ''}): "
                           "every configuration recorded ships its cubin, and Triton's autotuner benchmarks them on "
                           f"the first call (nothing compiles); kbuild record on an {target.name} GPU measures a "
                           "choice")

    def _usable(self, report: RecordingReport) -> bool:
        """Whether the recorded choices can be put on entries: the autotuner imports here with the recorded key
        (the arguments a choice is filed under) and pruning (a pruned list has no fixed order). Keeps this import's
        descriptor (``described``)."""
        from kbuild.record.recorder import autotune_descriptor

        if self.kernel.autotune is None:
            return False
        here = self.imported.autotuner
        self.described = autotune_descriptor(here) if here is not None else {}
        if not self.described or any(self.described[f] != self.kernel.autotune.get(f) for f in ("key", "prunes")):
            report.say(f"{self.kernel.function}: its @triton.autotune here has not the recorded key or pruning: no "
                       "choice ships (Triton autotunes on the first call)")
            return False
        return True

    def of(self, d: Declared, target: Target) -> tuple[list[list[Any]] | None, str | None, list[str]]:
        """``(tuning keys whose choice it is, choice source, notes)`` of one declaration × target."""
        if not self.usable:
            return None, None, []
        config = next((s.autotune_config for s in d.recorded.values() if s.autotune_config is not None), None)
        mine: list[tuple[tuple[Any, ...], Choice]] = []
        unchosen: list[tuple[Any, ...]] = []
        for (tname, _), (key, found, configs) in sorted(self.answers.items(), key=lambda kv: kv[0][1]):
            if tname != target.name or not fits(self.kernel, self.imported.jit, d.spec.signature,
                                                d.spec.constexprs, key):
                continue
            if found is None and config in configs:
                unchosen.append(key)
            elif found is not None and found.config == config:
                mine.append((key, found))
        if not mine:
            if not unchosen:
                return None, None, []
            return None, None, [f"no autotune choice on {target.name} for key(s) "
                                f"{', '.join(str(list(k)) for k in unchosen)}: Triton's autotuner benchmarks this "
                                "configuration among others on the first call (from the shipped cubins)"]
        (key, found), rest = mine[0], mine[1:]
        notes = [f"autotune choice for key {list(key)} on {target.name}: {found.source} ({found.detail})"]
        if rest:
            notes.append(f"also the choice for key(s) {', '.join(str(list(k)) for k, _ in rest)} "
                         f"({', '.join(sorted({f.source for _, f in rest}))})")
        return [list(key), *(list(k) for k, _ in rest)], found.source, notes


# ----------------------------------------------------------------------------------------------
# Both kinds of entries


def collapse(declared: Sequence[KernelBuild], recorded: Sequence[KernelBuild],
             report: RecordingReport) -> list[KernelBuild]:
    """The hand-written builds, then each recorded one whose baseline key none before has (once per key).

    A hand-written build that the tune phase could not tune (no bench spec, a space of one point) gives way to a
    recorded build of the same key that it can (a bench spec from the recorded call, a derived space:
    :func:`_tunable`): the same baseline cubin, tuned from the recording. A hand-written bench spec or space wins."""
    seen = {b.baseline_key.hex: b for b in declared}
    out = list(declared)
    report.collapsed = 0
    for b in recorded:
        first = seen.get(b.baseline_key.hex)
        if first is not None:
            report.collapsed += 1
            if first.recorded is None and _tunable_instead(first, b):
                out[out.index(first)] = seen[b.baseline_key.hex] = b
                report.say(f"{b.spec.source} ({b.spec.name}) on {b.target.name}: declared in [tool.kbuild.kernels] "
                           f"as {first.spec.name!r} too, with no bench spec or space: built once, tuned from the "
                           "recorded call")
            elif first.recorded is None:
                report.say(f"{b.spec.source} ({b.spec.name}) on {b.target.name}: declared in [tool.kbuild.kernels] "
                           f"as {first.spec.name!r} too: built once")
            continue
        seen[b.baseline_key.hex] = b
        out.append(b)
    report.built = sum(1 for b in out if b.recorded is not None)
    return out


def _tunable_instead(declared: KernelBuild, recorded: KernelBuild) -> bool:
    """Whether ``recorded`` (same baseline key) can be tuned where the hand-written ``declared`` cannot: the
    declaration has neither a bench spec nor a space, the recorded build has a derived space."""
    return (not declared.spec.bench and len(declared.space) <= 1 and recorded.recorded is not None
            and recorded.recorded.derived is not None and len(recorded.space) > 1)


def recorded_builds(settings: Settings, targets: Sequence[Target]) -> tuple[list[KernelBuild], RecordingReport]:
    """The builds the settings' recordings make for ``targets`` (not yet collapsed), and the report so far."""
    recordings = load_recordings(settings)
    report = RecordingReport(recordings=[name for name, _ in recordings], loaded=recordings)
    declared = declarations(recordings, targets, report)
    return resolve_recorded(settings, declared, targets, report), report


def coverage_lines(report: RecordingReport, index: dict[str, Any], data_dir: Path) -> list[str]:
    """What the package data just written answers of the recordings (:func:`kbuild.record.covers.
    recording_coverage`, the run time's own lookup, as ``kbuild inspect --recording`` asks it): one line of counts
    per recording, then one per specialisation not answered without compiling."""
    from kbuild.record.covers import recording_coverage
    from kbuild.runtime.index import index_bytes, parse_index

    shipped = parse_index(index_bytes(index), data_dir=data_dir, where=str(data_dir))
    lines = []
    for name, rec in report.loaded:
        cov = recording_coverage([shipped], rec)
        rows = cov["rows"]
        answered = [r for r in rows if r["answered"] and r["stage"] == "zero-jit"]
        calls = sum(r["calls"] for r in rows)
        lines.append(f"{name}: the package data answers {len(answered)} of {len(rows)} recorded specialisation(s) "
                     f"({sum(r['calls'] for r in answered)} of {calls} calls) without compiling"
                     + (f"; {cov['tunings_answered']} of {cov['tunings']} autotune key(s) without benchmarking"
                        if cov["tunings"] else ""))
        missed = [r for r in rows if r not in answered]
        lines += [f"{name}: not answered: {r['function']} on {r['target']}: "
                  f"{r['reason'] or 'Triton compiles it first (' + str(r['stage']) + ')'}"
                  for r in missed[:MAX_MISSES_SAID]]
        if len(missed) > MAX_MISSES_SAID:
            lines.append(f"{name}: ... and {len(missed) - MAX_MISSES_SAID} more not answered")
    return lines


#: Specialisations not answered that :func:`coverage_lines` names one by one (per recording).
MAX_MISSES_SAID = 12


__all__ = [
    "Declared",
    "RecordingReport",
    "collapse",
    "coverage_lines",
    "declarations",
    "load_recordings",
    "recorded_builds",
    "resolve_recorded",
]
