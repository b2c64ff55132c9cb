"""A bench spec made from a recorded call: tune what a package runs, with no hand-written spec.

A hand-written spec (:mod:`kbuild.bench.spec`) restates what the package already does: the signature, the
constexprs, an input generator, the grid, a reference. A recording (``kbuild record``, :mod:`kbuild.record`)
holds all of it for each specialisation a workload launched: :func:`spec_from_recording` turns one recorded call
(a specialisation and one of its samples) into a :class:`~kbuild.bench.spec.BenchSpec`:

* **function**: imported from the recorded module and name, the ``@triton.autotune`` and ``@triton.heuristics``
  layers taken off; its source hash must be the recorded one (another version of the package, or a module that
  probed other hardware at import, is refused). Under Triton's interpreter (CPU tests) the hash cannot be
  computed and is not checked, which the spec's description says;
* **signature, constexprs, launch options**: as recorded. The rest of Triton's backend options must be its
  defaults for the target (a spec cannot pass others), else refused. For an autotuned kernel the autotuner's
  configurations are the spec's ``configs``, the recorded one first, unless a ``@triton.heuristics`` layer
  computes values per configuration (then the recorded configuration alone);
* **inputs**: generated, replayed from a capture, or as recorded, per argument by the rule of
  :mod:`kbuild.bench.recorded_inputs` (integer and bool tensors are replayed or refused); the rule and each
  argument's way are the spec's ``provenance``;
* **grid**: the recorded one, recomputed for the target's SM count where it follows the device
  (:func:`kbuild.bench.recorded_inputs.on_target`);
* **reference**: the recorded configuration's own output on the same inputs (the function launched through
  Triton's JIT with the recorded constexprs and options); a candidate configuration is accepted per output within
  :func:`kbuild.bench.tolerance.config_tolerance` of its dtype and the reduction length
  (:func:`kbuild.bench.tolerance.reduction_length` of the floating-point tensors). SASS edits of the recorded
  configuration stay bit-exact: ``outputs`` say ``None``;
* **outputs**: the recording does not say which arguments a kernel writes. Until a measurement session settles
  the spec on its device (:func:`~kbuild.bench.spec.settled`), every pointer argument is an output, updated in
  place (compared, never poisoned). :func:`probe_outputs` then runs the recorded configuration once: the arguments
  whose bytes changed are the outputs; a second run with those refilled (floating point ones) tells which keep
  something of their prior values (read back, or written only in part, like a loss row an ignored label skips):
  those are in place, never poisoned; integer outputs are taken to be in place. A kernel that writes none of its
  arguments on generated inputs is refused.

Which call: ``sample`` picks one of the specialisation's samples (an index in the recording's order); by default
the first captured one when an argument must be replayed, else the largest (most tensor bytes), or with ``small``
the smallest. A specialisation of an autotuned kernel with no samples (a configuration the autotuner only
benchmarked: those launches are not recorded) takes the samples of a sibling, the same call under another
configuration.

The spec reaches the measurement worker, another process, as a reference string (:func:`recorded_ref`):
``kbuild.bench.recorded:recorded_spec?recording=...&function=...&specialization=...``, which
:func:`kbuild.bench.spec.load_spec` calls. A hand-written spec wins over a recorded one (:func:`choose_bench`).
:func:`verdicts` says for every recorded specialisation whether a spec can be made, and how (``kbuild bench
--recording FILE --list``).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbuild.bench import recorded_inputs as ri
from kbuild.bench.spec import BenchSpec, BenchSpecError, Config, spec_ref
from kbuild.bench.tolerance import config_tolerance, reduction_length
from kbuild.record.capture import Captures, captures_dir
from kbuild.record.capture import load as load_captures
from kbuild.record.format import Kernel, Recording, Specialization, split_options
from kbuild.record.format import load as load_recording

#: The callable :func:`recorded_ref` names.
LOADER = "kbuild.bench.recorded:recorded_spec"
#: Seeds of the two runs :func:`probe_outputs` makes.
PROBE_SEED, REFILL_SEED = 4_242, 4_243
#: The rule of the inputs, as each spec's ``provenance`` states it.
RULE = ("floating-point tensors generated (seeded normal values, recorded shapes and strides); integer and bool "
        "tensors replayed from a capture of the call, else refused; scalars and None as recorded")


class Refused(BenchSpecError):
    """No spec can be made from this recorded call: :attr:`reason` says why (exit status 2 where a command asked
    for it)."""

    def __init__(self, where: str, reason: str) -> None:
        self.reason = reason
        super().__init__(where, f"cannot be tuned from its recording: {reason}")


@dataclass(frozen=True)
class Verdict:
    """What a recorded specialisation gives: a spec whose inputs are all generated (or recorded), one that replays
    captured values, or a refusal, with the reason."""

    function: str
    specialization: str
    status: str
    """``"generated"``, ``"replayed"`` or ``"refused"``."""
    reason: str
    arguments: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Each argument's way, in words (a spec's ``provenance``)."""

    def as_json(self) -> dict[str, Any]:
        return {"function": self.function, "specialization": self.specialization, "status": self.status,
                "reason": self.reason, "arguments": dict(self.arguments)}


# ----------------------------------------------------------------------------------------------
# The function


def jit_function(kernel: Kernel, *, check_hash: bool = True) -> tuple[Any, str]:
    """``(function, note)``: the recorded kernel's ``@triton.jit`` function, imported and unwrapped; ``note`` says
    whether its source hash was checked. :class:`Refused` when it cannot be imported or has another hash."""
    from triton.runtime.autotuner import Autotuner, Heuristics

    where = kernel.function
    try:
        obj: Any = importlib.import_module(kernel.module)
        for part in kernel.qualname.split("."):
            obj = getattr(obj, part)
    except Exception as exc:
        raise Refused(where, f"{kernel.function} cannot be imported here: {type(exc).__name__}: {exc}") from None
    while isinstance(obj, (Autotuner, Heuristics)):
        obj = obj.fn
    if not hasattr(obj, "arg_names") or not hasattr(obj, "fn"):
        raise Refused(where, f"{kernel.function} is a {type(obj).__name__}, not a @triton.jit function")
    if not hasattr(obj, "cache_key"):  # Triton's interpreter: no compiled form, no hash
        return obj, "source hash not checked (Triton's interpreter)"
    if check_hash:
        from kbuild.compile.triton_aot import source_hash

        here = source_hash(obj)
        if here != kernel.source_hash:
            raise Refused(where, f"its source hash here ({here[:16]}) is not the recorded one "
                                 f"({kernel.source_hash[:16]}): another version of the package, or module-level "
                                 f"values that differ on this machine")
    return obj, "source hash checked"


def _default_options(target: str) -> dict[str, Any]:
    """Triton's parsed backend options for ``target`` with no option set, as the recording stores the rest."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend

    from kbuild.compile.triton_aot import portable_options
    from kbuild.targets import parse_target

    options = make_backend(GPUTarget("cuda", parse_target(target).cc, 32)).parse_options({})
    return split_options(portable_options(dict(options.__dict__)))[1]


def _options_problem(recording: Recording, spec: Specialization) -> str | None:
    recorded = recording.compiler_options.get(spec.compiler_options)
    if recorded is None:
        return f"its compiler options {spec.compiler_options} are not in the recording"
    default = _default_options(spec.target)
    differ = sorted(k for k in set(recorded) | set(default) if recorded.get(k) != default.get(k))
    if differ:
        k = differ[0]
        return (f"it was compiled with {k} = {recorded.get(k)!r} (Triton's default for {spec.target}: "
                f"{default.get(k)!r}), which a bench spec cannot pass")
    return None


# ----------------------------------------------------------------------------------------------
# Samples and configurations


def samples_of(kernel: Kernel, spec: Specialization) -> list[dict[str, Any]]:
    """The specialisation's samples, or a sibling's: the same call under another autotuner configuration."""
    if spec.samples or kernel.autotune is None:
        return list(spec.samples)
    names = _config_names(kernel)
    own = {k: v for k, v in spec.constexprs.items() if k not in names}
    for other in sorted(kernel.specializations.values(), key=lambda s: s.id):
        if other.samples and other.target == spec.target and other.signature == spec.signature and {
                k: v for k, v in other.constexprs.items() if k not in names} == own:
            return list(other.samples)
    return []


def _config_names(kernel: Kernel) -> set[str]:
    return {str(k) for c in (kernel.autotune or {}).get("configs", []) for k in c.get("kwargs", {})}


def _pick(samples: Sequence[Mapping[str, Any]], index: int | None, *, small: bool, spec_id: str,
          captures: Captures | None) -> int:
    if index is not None:
        return index
    if small:
        return min(range(len(samples)), key=lambda i: (ri.tensor_bytes(samples[i]), i))
    captured = [i for i, s in enumerate(samples) if (c := ri.capture_for(captures, spec_id, s)) and "tensors" in c]
    largest = max(range(len(samples)), key=lambda i: (ri.tensor_bytes(samples[i]), -i))
    return captured[0] if captured else largest


def _configs(kernel: Kernel, spec: Specialization) -> tuple[list[Config], set[str], str]:
    """``(configs, constexprs they set, note)``: the recorded configuration first, then the autotuner's others."""
    o = spec.options

    def recorded(constexprs: dict[str, Any]) -> Config:
        return Config(constexprs, int(o.get("num_warps") or 4), int(o.get("num_stages") or 3),
                      o.get("maxnreg") or None, int(o.get("num_ctas") or 1), o.get("ptx_options") or None)

    names = _config_names(kernel)
    if kernel.autotune is None or not names:
        return [recorded({})], set(), "the recorded configuration"
    if "inside" in kernel.heuristics.values():
        return [recorded({})], set(), ("the recorded configuration alone (a @triton.heuristics layer computes "
                                       "values per autotuner configuration)")
    if not names <= set(spec.constexprs):
        return [recorded({})], set(), "the recorded configuration (autotuner keys not all constexprs)"
    first = recorded({n: spec.constexprs[n] for n in sorted(names)})
    out = [first]
    for c in kernel.autotune["configs"]:
        kw = {n: c.get("kwargs", {}).get(n, spec.constexprs[n]) for n in sorted(names)}
        cfg = Config(kw, int(c.get("num_warps") or 4), int(c.get("num_stages") or 3), c.get("maxnreg") or None,
                     int(c.get("num_ctas") or 1))
        if cfg.label() not in {x.label() for x in out}:
            out.append(cfg)
    return out, names, f"the recorded configuration, then the autotuner's other {len(out) - 1}"


# ----------------------------------------------------------------------------------------------
# The spec


def spec_from_recording(kernel: Kernel, specialization: Specialization, sample: int | None = None, *,
                        recording: Recording, captures: Captures | None = None, target: str | None = None,
                        small: bool = False, ref: str = "") -> BenchSpec:
    """The bench spec of one recorded call (the module docstring); :class:`Refused` with the reason otherwise.

    ``sample`` indexes the specialisation's samples (None: chosen, see the module docstring); ``target`` is the
    architecture to tune for (default: the recorded one); ``captures`` the ``kbuild record --capture`` folder."""
    from kbuild.arch import find
    from kbuild.compile.triton_aot import triton_constexprs
    from kbuild.targets import parse_target

    spec = specialization
    where = f"{kernel.function} specialisation {spec.id}"
    if spec.unsupported:
        raise Refused(where, f"the recorder could not declare it: {spec.unsupported}")
    try:
        cc = parse_target(target or spec.target).cc
    except ValueError as exc:
        raise Refused(where, str(exc)) from None
    fn, hash_note = jit_function(kernel)
    problem = _options_problem(recording, spec)
    if problem:
        raise Refused(where, problem)
    samples = samples_of(kernel, spec)
    if not samples:
        raise Refused(where, "no call of it was recorded (an autotuner's benchmarking launches are not), nor of the "
                             "same call under another configuration")
    if sample is not None and not 0 <= sample < len(samples):
        raise Refused(where, f"sample {sample} out of range (it has {len(samples)})")
    index = _pick(samples, sample, small=small, spec_id=spec.id, captures=captures)
    chosen = samples[index]
    if not isinstance(chosen.get("grid"), list) or not chosen["grid"] or not all(
            type(g) is int for g in chosen["grid"]):
        raise Refused(where, f"sample {index} has no recorded integer grid ({chosen.get('grid')!r})")
    row = find(cc)
    sms = row.part.sms if row is not None and row.part is not None else None
    try:
        call, changes = ri.on_target(chosen, samples, spec.signature, spec.constexprs, sms)
    except ri.NotReproducible as exc:
        raise Refused(where, str(exc)) from None
    capture = ri.capture_for(captures, spec.id, chosen)
    arguments = ri.plan_arguments(spec.signature, call, capture)
    refused: dict[str, list[str]] = {}
    for a in arguments:
        if a.how == ri.REFUSED:
            refused.setdefault(a.why, []).append(a.name)
    if refused:
        raise Refused(where, "; ".join(f"{', '.join(names)}: {why}" for why, names in refused.items()))
    configs, varying, configs_note = _configs(kernel, spec)
    fixed = triton_constexprs({k: v for k, v in spec.constexprs.items() if k not in varying})
    pointers = [a.name for a in arguments if a.how in (ri.GENERATED, ri.REPLAYED)]
    if not pointers:
        raise Refused(where, "it has no tensor argument to write")
    floats = [a.value["shape"] for a in arguments if a.how == ri.GENERATED and a.value["dtype"] in ri.FLOATS]
    k_len = reduction_length(floats)
    tols = {a.name: config_tolerance(a.value["dtype"], k_len) for a in arguments if a.name in pointers}
    tensors = _Tensors(arguments, captures)
    grid = tuple([*call["grid"], 1, 1][:3])
    launch = _Launcher(fn, list(fn.arg_names), {**fixed, **configs[0].constexprs}, configs[0].options(), grid)
    provenance = {a.name: a.text() for a in arguments}
    description = (f"{kernel.function} as recorded ({spec.target}, specialisation {spec.id}, sample {index} of "
                   f"{len(samples)}; {hash_note}); inputs: {RULE}; configurations: {configs_note}; reference: the "
                   f"recorded configuration's output, within the dtype's tolerance at reduction length {k_len}"
                   + (f"; for {parse_target(target or spec.target).name}: {'; '.join(changes)}" if changes else ""))
    out = BenchSpec(
        name=f"{kernel.name}@{spec.id[:8]}", fn=fn, signature=dict(spec.signature), constexprs=fixed,
        configs=configs, make_inputs=tensors.make, grid=lambda _c: grid,  # type: ignore[arg-type]
        outputs={n: None for n in pointers}, flops=0.0,
        bytes_moved=float(max(ri.tensor_bytes(call), 1)), archs=(cc,), reference=launch.reference, reference_is_a_configuration=True,
        reference_tols=tols, inplace=frozenset(pointers), provenance=provenance, description=description,
        settle=lambda s, device: probe_outputs(s, device, launch), ref=ref)
    from kbuild.bench.spec import validate_spec

    try:
        validate_spec(out)
    except BenchSpecError as exc:
        raise Refused(where, exc.detail) from None
    return out


class _Tensors:
    """``make_inputs`` of a recorded call: its arguments made by their plan (captures read once)."""

    def __init__(self, arguments: Sequence[ri.Argument], captures: Captures | None) -> None:
        self.arguments = list(arguments)
        self.captures = captures
        self._captured: dict[str, Any] = {}

    def make(self, seed: int, device: Any) -> dict[str, Any]:
        import torch

        # The meta device (shapes without memory: tests of huge recorded calls) has no generator.
        gen = None if torch.device(device).type == "meta" else torch.Generator(device=device).manual_seed(seed)
        out: dict[str, Any] = {}
        for a in self.arguments:
            if a.how == ri.NONE:
                out[a.name] = None
            elif a.how == ri.RECORDED:
                out[a.name] = ri.scalar(a.value)
            elif a.how == ri.GENERATED:
                out[a.name] = ri.generated(a.value, gen, device)
            else:
                out[a.name] = ri.replayed(a.value, self._capture(a), device)
        return out

    def _capture(self, a: ri.Argument) -> Any:
        if a.name not in self._captured:
            assert self.captures is not None and a.capture is not None
            self._captured[a.name] = self.captures.tensor(a.capture, dtype=a.value["dtype"], shape=a.value["shape"],
                                                          where=f"argument {a.name}")
        return self._captured[a.name]


class _Launcher:
    """The recorded configuration, launched through Triton's JIT (or its interpreter) on given inputs."""

    def __init__(self, fn: Any, names: list[str], constexprs: Mapping[str, Any], options: Mapping[str, Any],
                 grid: tuple[int, ...]) -> None:
        self.fn, self.names, self.constexprs, self.options, self.grid = fn, names, dict(constexprs), dict(options), grid

    def launch(self, inputs: Mapping[str, Any]) -> None:
        args = [self.constexprs[n] if n in self.constexprs else inputs[n] for n in self.names]
        self.fn[self.grid](*args, **self.options)

    def reference(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Every tensor argument after the recorded configuration ran on private copies of ``inputs``."""
        import torch

        run = {k: (_copy(v) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
        self.launch(run)
        return {k: v for k, v in run.items() if isinstance(v, torch.Tensor)}


def _copy(t: Any) -> Any:
    _, view = ri.strided(t.shape, t.stride(), t.dtype, t.device)
    view.copy_(t)
    return view


def _same_bytes(a: Any, b: Any) -> bool:
    import torch

    if a.numel() == 0:
        return True
    views = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return bool(torch.equal(a.view(views[a.element_size()]), b.view(views[b.element_size()])))


def probe_outputs(spec: BenchSpec, device: str, launcher: _Launcher) -> BenchSpec:
    """``spec`` with its outputs learnt on ``device`` (the module docstring): the arguments the recorded
    configuration writes, and of those the ones it reads back (``inplace``). :class:`Refused` when it writes
    none."""
    import torch

    inputs = spec.make_inputs(PROBE_SEED, device)
    first = {k: (_copy(v) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    launcher.launch(first)
    if device != "cpu":
        torch.cuda.synchronize()
    written = [n for n in spec.outputs if not _same_bytes(inputs[n], first[n])]
    if not written:
        raise Refused(spec.name, "the recorded configuration wrote none of its tensor arguments on generated inputs")
    second = {k: (_copy(v) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    gen = torch.Generator(device=device).manual_seed(REFILL_SEED)
    refilled = [n for n in written if second[n].is_floating_point()]
    for n in refilled:
        second[n].copy_(torch.randn(second[n].shape, generator=gen, device=device, dtype=torch.float32))
    launcher.launch(second)
    if device != "cpu":
        torch.cuda.synchronize()
    inplace = {n for n in written if n not in refilled or not _same_bytes(first[n], second[n])}
    provenance = dict(spec.provenance)
    for n in spec.outputs:
        role = ("written, its prior values kept where not written or read back (in place: never poisoned)"
                if n in inplace else "written (an output)") if n in written else "not written (an input)"
        provenance[n] = f"{provenance.get(n, '')}; {role}, probed on {device}".lstrip("; ")
    return dataclasses.replace(spec, outputs={n: spec.outputs[n] for n in written}, inplace=frozenset(inplace),
                               reference_tols={n: spec.reference_tols[n] for n in written if n in spec.reference_tols},
                               provenance=provenance)


# ----------------------------------------------------------------------------------------------
# Referring to a recorded spec


def recorded_ref(recording: str | os.PathLike[str], function: str, specialization: str, *,
                 sample: int | None = None, target: str | None = None,
                 captures: str | os.PathLike[str] | None = None) -> str:
    """The reference :func:`kbuild.bench.spec.load_spec` (and so the measurement worker) loads the recorded spec
    by: the recording's absolute path, the kernel's ``module:qualname``, the specialisation's id, and optionally the
    sample, the target and the captures folder."""
    args = {"recording": str(Path(recording).resolve()), "function": function, "specialization": specialization}
    if sample is not None:
        args["sample"] = str(sample)
    if target is not None:
        args["target"] = target
    if captures is not None:
        args["captures"] = str(Path(captures).resolve())
    return spec_ref(LOADER, **args)


def recorded_spec(recording: str, function: str, specialization: str, sample: str = "", target: str = "",
                  captures: str = "", small: bool = False) -> BenchSpec:
    """The callable :func:`recorded_ref` names: loads the recording (and its captures folder, given or the one
    beside it) and makes the spec."""
    rec = load_recording(recording)
    kernel = next((k for k in rec.kernels.values() if k.function == function), None)
    if kernel is None:
        raise BenchSpecError(recording, f"no kernel {function!r} in the recording")
    spec = kernel.specializations.get(specialization)
    if spec is None:
        raise BenchSpecError(recording, f"{function} has no specialisation {specialization!r}")
    folder = Path(captures) if captures else captures_dir(recording)
    try:
        index = int(sample) if sample else None
    except ValueError:
        raise BenchSpecError(recording, f"sample {sample!r} is not a whole number") from None
    return spec_from_recording(kernel, spec, index, recording=rec, captures=load_captures(folder),
                               target=target or None, small=small,
                               ref=recorded_ref(recording, function, specialization, sample=index,
                                                target=target or None, captures=captures or None))


def choose_bench(hand_written: str | None, recorded: str | None) -> tuple[str | None, str]:
    """``(bench spec reference, where it comes from)`` for a kernel: its hand-written spec when it has one (it
    overrides everything a recording would give), else the recorded one, else none."""
    if hand_written:
        return hand_written, "hand-written"
    if recorded:
        return recorded, "recording"
    return None, "none"


# ----------------------------------------------------------------------------------------------
# What a recording gives


def representative(kernel: Kernel, target: str | None = None) -> Specialization | None:
    """The specialisation of ``kernel`` a per-kernel report takes: the most called one with samples (its own or a
    sibling's), the recorded ``target``'s when given; ties by id."""
    specs = [s for s in kernel.specializations.values() if target is None or s.target == target]
    if not specs:
        return None
    return max(specs, key=lambda s: (bool(samples_of(kernel, s)), s.calls, s.id))


def verdicts(recording: Recording, *, captures: Captures | None = None, target: str | None = None,
             per_kernel: bool = True, small: bool = True,
             make: Callable[..., BenchSpec] = spec_from_recording) -> list[Verdict]:
    """For each kernel (its :func:`representative` specialisation) or each specialisation: whether a spec can be
    made (with every input generated or recorded, or with some replayed) or why not. Builds each spec (imports each
    kernel; needs no GPU)."""
    out: list[Verdict] = []
    for kernel in sorted(recording.kernels.values(), key=Kernel.sort_key):
        specs = [representative(kernel)] if per_kernel else sorted(kernel.specializations.values(),
                                                                   key=lambda s: s.id)
        for spec in specs:
            if spec is None:
                continue
            try:
                made = make(kernel, spec, recording=recording, captures=captures, target=target, small=small)
            except Refused as exc:
                out.append(Verdict(kernel.function, spec.id, "refused", exc.reason))
                continue
            replayed = [n for n, how in made.provenance.items() if how.startswith(ri.REPLAYED)]
            status = "replayed" if replayed else "generated"
            reason = (f"replays {', '.join(replayed)}" if replayed else "every input generated or as recorded")
            out.append(Verdict(kernel.function, spec.id, status, f"{reason}; {len(made.configs)} configuration(s)",
                               dict(made.provenance)))
    return out



__all__ = ["LOADER", "PROBE_SEED", "REFILL_SEED", "RULE", "Refused", "Verdict", "choose_bench", "jit_function",
           "probe_outputs", "recorded_ref", "recorded_spec", "representative", "samples_of", "spec_from_recording",
           "verdicts"]
