"""The recorder inside the recorded process: specialisations, calls and samples, kept until the process ends.

Both modes (:mod:`kbuild.record.gpu`, :mod:`kbuild.record.cpu`) hand it what Triton specialised a call to (a
:class:`kbuild.runtime.keys.CallSpecialization`, from Triton's own hook or binder), the layers the call went
through (the ``@triton.autotune`` and ``@triton.heuristics`` objects, from :class:`Frames`), and each launch's
arguments, grid and SM count. It keeps them as a :class:`kbuild.record.format.Recording` and writes it, with the
notes a parent should see, into the session's directory when the process ends (:meth:`Recorder.flush`: at exit,
and in a forked ``multiprocessing`` child through its finaliser).

Per launch it does little: the call's argument key (dtypes, shapes, strides and scalar values, as a tuple) is
looked up in the specialisation's set of keys already seen; only a new one is described and compared with the
samples kept (the ``samples_per_specialization`` smallest distinct in canonical order, so that which process saw
a call first does not change what is kept).
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbuild.record.format import Kernel, Recording, Specialization, finite, sample_order, split_options

log = logging.getLogger("kbuild.record")

#: Distinct argument keys remembered per specialisation (a workload with more distinct calls than this
#: describes every further call again: slower, the same result).
MAX_SEEN = 4096
#: Seconds between two writes of a process's part file while it runs: at once after a new specialisation,
#: sample, tuning or note, and at most this often when only calls were counted (and at exit). A process killed
#: without an exit (a ``multiprocessing.Pool`` worker on ``terminate()``) keeps what was written: at most the
#: calls of its last second are lost.
FLUSH_NEW = 0.0
FLUSH_CALLS = 1.0
#: The largest tensor rank or tuple length described in a sample (longer ones are cut, with the length kept).
_MAX_ITEMS = 16
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


@dataclass
class Frame:
    """One layer of a call being made: an ``@triton.autotune`` or ``@triton.heuristics`` object."""

    layer: Any
    kind: str
    """``"autotune"`` or ``"heuristics"``."""
    key: tuple[Any, ...] | None = None
    """The autotuner's cache key of the call (Triton's tuple), when it has more than one config."""
    config: int | None = None
    """The config being benchmarked or launched (an index into the autotuner's configs), when known."""
    benchmarking: bool = False
    benchmarked: list[int] = field(default_factory=list)


class Frames(threading.local):
    """The layers of the call in progress on this thread (outermost first)."""

    def __init__(self) -> None:
        self.stack: list[Frame] = []

    def autotuner(self) -> Frame | None:
        return next((f for f in reversed(self.stack) if f.kind == "autotune"), None)

    def heuristic_names(self) -> dict[str, str]:
        """The names the ``@triton.heuristics`` layers set, each ``"outside"`` the autotuner (above it) or
        ``"inside"`` (below it, or no autotuner)."""
        out: dict[str, str] = {}
        place = "inside" if self.autotuner() is None else "outside"
        for f in self.stack:
            if f.kind == "autotune":
                place = "inside"
            elif f.kind == "heuristics":
                for n in getattr(f.layer, "values", {}):
                    out.setdefault(str(n), place)
        return out

    def benchmarking(self) -> bool:
        return any(f.benchmarking for f in self.stack)


def config_json(config: Any) -> dict[str, Any]:
    """A ``triton.Config`` as the format holds it."""
    return {"kwargs": {str(k): json_value(v) for k, v in sorted(getattr(config, "kwargs", {}).items())},
            "num_warps": getattr(config, "num_warps", None), "num_stages": getattr(config, "num_stages", None),
            "num_ctas": getattr(config, "num_ctas", None), "maxnreg": getattr(config, "maxnreg", None)}


def autotune_descriptor(autotuner: Any) -> dict[str, Any]:
    return {"key": [str(k) for k in getattr(autotuner, "keys", [])],
            "configs": [config_json(c) for c in getattr(autotuner, "configs", [])],
            "prunes": bool(getattr(autotuner, "early_config_prune", None) or getattr(autotuner, "perf_model", None))}


def config_index(autotuner: Any, config: Any) -> int | None:
    configs = list(getattr(autotuner, "configs", []))
    for i, c in enumerate(configs):
        if c is config:
            return i
    try:
        return configs.index(config)
    except ValueError:
        return None


def autotune_key(autotuner: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The key ``Autotuner.run`` (Triton 3.6) looks its choice up under, or None with one config (no key)."""
    if len(getattr(autotuner, "configs", ())) <= 1:
        return None
    all_args = {**dict(zip(autotuner.arg_names, args)), **kwargs}
    _args = {k: v for (k, v) in all_args.items() if k in autotuner.arg_names}
    key = [_args[k] for k in autotuner.keys if k in _args]
    for arg in _args.values():
        if hasattr(arg, "dtype"):
            key.append(str(arg.dtype))
    return tuple(key)


def json_value(value: Any) -> Any:
    """A Python value (an argument, a constexpr, a key item) as JSON data, without addresses."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if type(value) is int:
        return value
    if type(value) is float:
        return finite(value)
    if isinstance(value, (tuple, list)):
        return [json_value(v) for v in value[:_MAX_ITEMS]]
    return _ADDRESS.sub("", str(value))


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "data_ptr") and hasattr(value, "dtype") and hasattr(value, "shape")


_SCALAR_TYPES = frozenset({int, float, bool, str, type(None)})


def arg_key(value: Any) -> Any:
    """A hashable key of an argument (within this process): equal for arguments a sample describes alike."""
    kind = type(value)
    if kind in _SCALAR_TYPES:
        return (kind, value)
    if _is_tensor(value):
        try:
            return (value.dtype, value.shape, value.stride())
        except Exception:  # a tensor-like object without strides
            return (str(value.dtype), tuple(getattr(value, "shape", ())), None)
    if kind is tuple:
        return (tuple, tuple([arg_key(v) for v in value[:_MAX_ITEMS]]))
    return (kind,)


def describe(value: Any) -> Any:
    """An argument in a sample: a tensor's dtype, shape and strides, a scalar's value, another object's type."""
    if _is_tensor(value):
        try:
            strides: Any = [int(s) for s in value.stride()]
        except Exception:
            strides = None
        return {"dtype": str(value.dtype), "shape": [int(d) for d in value.shape], "strides": strides}
    if isinstance(value, tuple):
        return [describe(v) for v in value[:_MAX_ITEMS]]
    if value is None or isinstance(value, (bool, str)) or type(value) is int:
        return value
    if type(value) is float:
        return finite(value)
    return {"type": f"{type(value).__module__}.{type(value).__qualname__}"}


def grid_values(grid: Any) -> list[Any] | None:
    if not isinstance(grid, (tuple, list)):
        return None
    return [int(g) if isinstance(g, int) and not isinstance(g, bool) else json_value(g) for g in grid[:3]]


class SpecState:
    """A specialisation being recorded: its kernel and :class:`Specialization` (the samples kept so far) and the
    argument keys already seen."""

    def __init__(self, recorder: Recorder, kernel: Kernel, spec: Specialization, runtime_params: Sequence[str]) -> None:
        self.recorder = recorder
        self.kernel = kernel
        self.spec = spec
        self.params = list(runtime_params)
        self.seen: set[Any] = set()
        self._delta: Any = None
        self._delta_generation = -1

    def call(self, args: Mapping[str, Any], grid: Any, sm_count: int) -> None:
        """Count one launch and keep its sample when it is among the smallest distinct ones."""
        recorder = self.recorder
        with recorder.lock:
            if self._delta_generation != recorder.generation:
                self._delta = recorder.delta_of(self.kernel, self.spec)
                self._delta_generation = recorder.generation
            delta = self._delta
            delta.calls += 1
            recorder.dirty = True
            self._sample(args, grid, sm_count, delta)
        recorder.tick()

    def _sample(self, args: Mapping[str, Any], grid: Any, sm_count: int, delta: Specialization) -> None:
        try:
            key = (tuple([arg_key(args.get(p)) for p in self.params]),
                   tuple(grid) if isinstance(grid, (tuple, list)) else None, sm_count)
            if key in self.seen:
                return
            hashable = True
        except TypeError:  # an unhashable scalar: describe it every time
            hashable = False
        sample = {"args": {p: describe(args.get(p)) for p in self.params}, "grid": grid_values(grid),
                  "sm_count": sm_count}
        if self.recorder.capturer is not None:
            self.recorder.capture(self.spec.id, sample, {p: args.get(p) for p in self.params})
        kept, cut = self._keep(sample)
        if kept:
            delta.samples.append(sample)
            self.recorder.urgent = True
        if cut:
            delta.samples_truncated = True
        if hashable and len(self.seen) < MAX_SEEN:
            self.seen.add(key)

    def _keep(self, sample: dict[str, Any]) -> tuple[bool, bool]:
        """``(kept, something cut)``: keep ``sample`` when it is among the smallest distinct ones."""
        spec = self.spec
        limit = self.recorder.samples
        order = sample_order(sample)
        orders = [sample_order(s) for s in spec.samples]
        if order in orders:
            return False, False
        if len(spec.samples) < limit:
            spec.samples.append(sample)
            spec.samples.sort(key=sample_order)
            return True, False
        spec.samples_truncated = True
        if order < orders[-1]:
            spec.samples[-1] = sample
            spec.samples.sort(key=sample_order)
            return True, True
        return False, True


class Recorder:
    """What this process recorded, and what it has not written yet.

    ``recording`` holds every kernel and specialisation with the samples kept so far (what decides whether a new
    call's sample is kept); ``delta`` what is new since the last write: new specialisations and tunings, calls
    counted and samples kept since. :meth:`flush` appends ``delta`` as one line to the process's part file
    (``part-<pid>-<random>.jsonl``) and starts a new one, so that each write costs what changed, and a process
    killed without an exit loses only what came after its last write. The parent merges every line of every
    part file (calls summed, samples united and cut to the smallest): the result does not depend on when the
    writes happened.
    """

    def __init__(self, *, parts_dir: str | None, samples: int, mode: str, capturer: Any = None) -> None:
        self.parts_dir = parts_dir
        self.mode = mode
        self.samples = samples
        self.capturer = capturer
        """A :class:`kbuild.record.capture.Capturer` (``--capture``), or None."""
        self.frames = Frames()
        self.after_fork_registered = False
        self._reset()

    def _reset(self) -> None:
        self.lock = threading.RLock()
        self.recording = Recording(samples_per_specialization=self.samples)
        self.delta = Recording(samples_per_specialization=self.samples)
        self.generation = getattr(self, "generation", 0) + 1
        """Bumped whenever :attr:`delta` is replaced (a specialisation's entry in it is looked up again)."""
        self.kernels: dict[tuple[int, int], Kernel] = {}
        self.notes: list[str] = []
        self.captures: list[dict[str, Any]] = []
        """Captured calls not written yet (:meth:`capture`)."""
        self._noted: set[str] = set()
        self._hashes: dict[int, str] = {}
        self._dists: dict[str, dict[str, str] | None] = {}
        self.memo: dict[Any, Any] = {}
        """The modes' caches (specialisation states by Triton's cache key or by the compiled kernel's hash,
        binders, tunings seen)."""
        self.sm_counts: dict[Any, int] = {}
        self.part_name = f"part-{os.getpid()}-{secrets.token_hex(4)}.jsonl"
        self.urgent = False
        """A new specialisation or tuning not written yet."""
        self.dirty = False
        """Calls not written yet."""
        self.last_flush = 0.0

    def after_fork_in_child(self) -> None:
        """A forked child records only its own launches, into its own part file."""
        self._reset()
        self.frames = Frames()
        flush_in_multiprocessing_child(self)

    def tick(self) -> None:
        """After a call: write when something new waits (:data:`FLUSH_NEW`, :data:`FLUSH_CALLS`)."""
        if not (self.urgent or self.dirty):
            return
        waited = time.monotonic() - self.last_flush
        if waited >= (FLUSH_NEW if self.urgent else FLUSH_CALLS):
            self.flush()

    def note(self, message: str) -> None:
        """A problem the parent reports once (e.g. a specialisation that could not be recorded)."""
        message = _ADDRESS.sub("", message)
        with self.lock:
            if message not in self._noted and len(self._noted) < 100:
                self._noted.add(message)
                self.notes.append(message)
                self.urgent = True

    def capture(self, spec_id: str, sample: dict[str, Any], args: Mapping[str, Any]) -> None:
        """``--capture``: keep a new call's integer and bool tensors (:mod:`kbuild.record.capture`)."""
        try:
            entry = self.capturer.offer(spec_id, sample, args)
        except Exception as exc:  # never break the workload
            self.note(f"a call's tensors could not be captured: {type(exc).__name__}: {exc}")
            return
        if entry is not None:
            self.captures.append(entry)
            self.urgent = True

    # -- kernels and specialisations ------------------------------------------------------------

    def _source_hash(self, jit: Any) -> str:
        got = self._hashes.get(id(jit))
        if got is None:
            from kbuild.compile.triton_aot import source_hash

            got = self._hashes[id(jit)] = source_hash(jit)
        return got

    def _globals(self, jit: Any) -> dict[str, dict[str, Any]]:
        """What the kernel reads at module level here (:func:`kbuild.compile.folded.snapshot`): a build on another
        machine sets it back when its own import differs. Empty when it cannot be described (noted)."""
        from kbuild.compile.folded import snapshot

        try:
            return snapshot(jit)
        except Exception as exc:  # never break the workload
            self.note(f"{jit.fn.__module__}:{jit.fn.__qualname__}: its module-level values could not be recorded "
                      f"({type(exc).__name__}: {exc})")
            return {}

    def _distribution(self, jit: Any) -> dict[str, str] | None:
        module = str(jit.fn.__module__)
        if module not in self._dists:
            self._dists[module] = distribution_of(jit)
        return self._dists[module]

    def kernel(self, jit: Any, autotuner: Any | None, heuristics: Mapping[str, str]) -> Kernel:
        """The kernel record of ``jit`` called through ``autotuner`` (None: not autotuned)."""
        slot = (id(jit), id(autotuner) if autotuner is not None else 0)
        with self.lock:
            kernel = self.kernels.get(slot)
            if kernel is None:
                template = Kernel(str(jit.fn.__module__), str(jit.fn.__qualname__), str(jit.fn.__name__),
                                  self._source_hash(jit), self._distribution(jit),
                                  autotune_descriptor(autotuner) if autotuner is not None else None,
                                  globals=self._globals(jit))
                kernel = self.kernels[slot] = self.recording.kernel(template)
            for name, place in heuristics.items():
                if name not in kernel.heuristics:
                    kernel.heuristics[name] = place
                    self.urgent = True
            return kernel

    def delta_of(self, kernel: Kernel, spec: Specialization) -> Specialization:
        """``spec``'s entry in :attr:`delta` (added, with no calls and no samples, when not there yet)."""
        held = self.delta.kernel(kernel)
        got = held.specializations.get(spec.id)
        if got is None:
            self.delta.compiler_options.setdefault(spec.compiler_options,
                                                   self.recording.compiler_options[spec.compiler_options])
            got = held.specializations[spec.id] = Specialization(
                spec.target, spec.triton, spec.signature, spec.constexprs, spec.options, spec.compiler_options,
                spec.heuristics, spec.autotune_config, spec.unsupported)
        return got

    def specialization(self, jit: Any, call: Any) -> SpecState:
        """The state of the specialisation ``call`` (a :class:`kbuild.runtime.keys.CallSpecialization`) of ``jit``,
        as reached through the layers on this thread's :class:`Frames`."""
        from kbuild.targets import Target

        frame = self.frames.autotuner()
        autotuner = frame.layer if frame is not None else None
        heuristics = self.frames.heuristic_names()
        kernel = self.kernel(jit, autotuner, heuristics)
        config: int | None = None
        if frame is not None:
            config = frame.config
            if config is None:
                chosen = getattr(autotuner, "cache", {}).get(frame.key) if frame.key is not None else None
                config = config_index(autotuner, chosen) if chosen is not None else (
                    0 if len(getattr(autotuner, "configs", ())) == 1 else None)
        launch, rest = split_options(call.options)
        constexprs = {k: _checked(v) for k, v in call.constexprs.items()}
        with self.lock:
            spec = Specialization(
                target=Target(int(call.cc)).name, triton=call.triton_version, signature=call.declaration(),
                constexprs=constexprs, options=launch, compiler_options=self.recording.add_compiler_options(rest),
                heuristics={h: constexprs[h] for h in heuristics if h in constexprs}, autotune_config=config,
                unsupported=_ADDRESS.sub("", call.unsupported) if call.unsupported else None)
            held = kernel.specializations.get(spec.id)
            if held is None:
                held = kernel.specializations[spec.id] = spec
                self.delta_of(kernel, held)
                self.urgent = True
            runtime = [p.name for p in jit.params if not p.is_constexpr]
            return SpecState(self, kernel, held, runtime)

    def tuning(self, jit: Any, autotuner: Any, entry: dict[str, Any]) -> None:
        """An autotuner's run for a key: ``{"target", "key", "configs", "choice", "source", "sm_count"}``."""
        kernel = self.kernel(jit, autotuner, self.frames.heuristic_names())
        with self.lock:
            before = len(kernel.tunings)
            kernel.add_tunings([entry])
            if len(kernel.tunings) != before:
                self.delta.kernel(kernel).add_tunings([entry])
                self.urgent = True

    # -- writing ------------------------------------------------------------------------------------

    def flush(self) -> None:
        """Append what is new since the last write to this process's part file (nothing when nothing is new)."""
        if self.parts_dir is None:
            return
        try:
            with self.lock:
                self.urgent = self.dirty = False
                self.last_flush = time.monotonic()
                if not self.delta.kernels and not self.notes and not self.captures:
                    return
                from kbuild.canonical import canonical_json

                doc: dict[str, Any] = {"recording": self.delta.to_json(derived=False), "notes": self.notes,
                                       "mode": self.mode}
                if self.captures:
                    doc["captures"] = self.captures
                line = canonical_json(doc) + b"\n"
                self.delta = Recording(samples_per_specialization=self.samples)
                self.generation += 1
                self.notes = []
                self.captures = []
                fd = os.open(Path(self.parts_dir) / self.part_name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                try:
                    view = memoryview(line)
                    while view:
                        view = view[os.write(fd, view):]
                finally:
                    os.close(fd)
        except Exception as exc:  # never fail the program that runs
            import sys

            print(f"kbuild record: cannot save this process's recording: {exc}", file=sys.stderr)


def _checked(value: Any) -> Any:
    """A constexpr value as recorded (JSON data; a NaN float as ``{"float": "nan"}``)."""
    if type(value) is float:
        return finite(value)
    return value


def distribution_of(jit: Any) -> dict[str, str] | None:
    """``{"name", "version"}`` of the installed distribution the kernel's module comes from (None: a module of the
    project), by the lookup the build keys a kernel with (:func:`kbuild.distributions.distribution_of` of the
    module's file, as :func:`kbuild.build.resolve.source_distribution` asks it)."""
    import sys

    from kbuild.distributions import distribution_of as lookup

    module = str(jit.fn.__module__)
    path = getattr(sys.modules.get(module), "__file__", None)
    if not isinstance(path, str):
        return None
    return lookup(path, module.partition(".")[0])


def flush_in_multiprocessing_child(recorder: Recorder) -> None:
    """A ``multiprocessing`` child started by fork or by a fork server leaves through ``os._exit`` after running its
    finalisers, not through ``atexit``: register the recorder's flush as one. ``Process._bootstrap`` clears the
    finalisers a child holds before it runs, then calls the after-fork callbacks: one of those registers it again."""
    import sys

    util = sys.modules.get("multiprocessing.util")
    if util is None:
        return
    util.Finalize(None, recorder.flush, exitpriority=100)
    if not recorder.after_fork_registered:
        recorder.after_fork_registered = True
        util.register_after_fork(recorder, _finalize_again)


def _finalize_again(recorder: Recorder) -> None:
    import sys

    sys.modules["multiprocessing.util"].Finalize(None, recorder.flush, exitpriority=100)


__all__ = ["MAX_SEEN", "Frame", "Frames", "Recorder", "SpecState", "arg_key", "autotune_descriptor", "autotune_key",
           "config_index", "config_json", "describe", "distribution_of", "flush_in_multiprocessing_child",
           "json_value"]
