"""Zero-JIT loading: a shipped kernel's first call launches the shipped cubin without running Triton's compiler.

The seam, read from Triton 3.6's source (``triton/runtime/jit.py``, ``triton/compiler/compiler.py``,
``triton/runtime/cache.py``, ``triton/runtime/autotuner.py``):

* ``JITFunction.run`` looks the call's specialisation up in the function's in-memory
  ``kernel_cache``; on a miss it calls ``_do_compile`` (jit.py ~l.713-721).
* ``_do_compile`` first calls ``knobs.runtime.jit_cache_hook`` with the ``JitFunctionInfo`` (module,
  name, the ``JITFunction``) and the call's signature, constants, attributes and options
  (jit.py ~l.829). A true return makes ``_do_compile`` return None, and ``run`` then returns
  *without launching* (l.720-721), so the hook cannot answer the call by itself.
* It then builds the ``ASTSource`` and calls ``self.compile(src, target=target, options=options.__dict__)``
  (l.831/847), puts the result into ``kernel_cache`` and calls ``jit_post_compile_hook``; ``run`` then
  launches it. ``self.compile`` is a per-function attribute that ``create_binder`` sets to
  ``triton.compile`` (l.665), looked up at each compile.
* ``triton.compile`` itself always computes Triton's cache key first (compiler.py l.245-248):
  ``get_cache_key`` hashes ``triton_key()``, which reads all 415 MB of ``libtriton.so`` once per
  process (cache.py l.272-299; 0.32 s on the build machine), and ``backend.hash()``. A cache
  manager (``knobs.cache.manager_class``) serving the shipped files under Triton's own key would
  pay that on every first call, which is most of Triton's 0.50 s warm-cache first call, and the
  key could only be matched by recomputing it the same way. So that seam is not used.
* ``CompiledKernel(src, metadata_group, hash)`` (compiler.py l.402-432) is what a cache hit
  returns: it needs only a ``<name>.json`` metadata file and a ``<name>.cubin`` file; the
  driver loads the bytes lazily in ``_init_handles`` (``launcher_cls``, ``utils.load_binary``).

So: the ``jit_cache_hook`` (:func:`cache_hook`) sees every compile of every ``@triton.jit``
function before it happens; for a function that an enabled package ships cubins for, it wraps the
function's own ``compile`` slot once (:class:`ShippedCompile`) and returns False. The wrapper gets
exactly what ``triton.compile`` would get (the ``ASTSource``, the target, the options) and asks the
lookup (:func:`kbuild.runtime.lookup.before_compile`). When the call's key
(:func:`kbuild.runtime.keys.specialization_from_source`: signature types, divisibility and
1-specialisation, constexprs, every backend option, the target's compute capability, Triton's version)
equals an index entry's, and the entry's recorded Triton metadata agrees with the call's options and
target, and the shipped cubin passes :meth:`kbuild.runtime.state.RuntimeState.verified_cubin` (read within
its recorded size, sha256, its ELF against the entry and the call: architecture, symbol, parameter layout,
block size, shared-memory use; no other key names it), it returns a ``CompiledKernel`` rebuilt from the
shipped cubin and that metadata (:func:`kbuild.runtime.handover.kernel_from_payload`,
the same rebuild the tuner uses between processes). Triton then caches, hooks and launches it as
its own. Anything else calls Triton's ``compile`` unchanged (logged once per kernel), after which
the post-compile substitution of :mod:`kbuild.runtime.hook` still applies (version 1 indexes).

``@triton.autotune``: ``Autotuner.run`` (autotuner.py l.212-241) benchmarks every configuration when
the call's tuning key is not in ``self.cache``; there is no hook before that. :func:`install`
therefore wraps ``Autotuner.run`` (class attribute, restored by :func:`uninstall`): before Triton's
own ``run``, an autotuner over a shipped function gets ``cache[key] = config`` for each index entry
with an ``autotune`` key for this GPU and Triton version, where ``config`` is the autotuner's own
``triton.Config`` equal to the entry's (:func:`kbuild.runtime.lookup.autotune_choices`) (kwargs, warps, stages, CTAs, maxnreg, ptx_options: a ``triton.Config``
has none, so an entry compiled with extra ptxas flags is never an autotuner's answer); an existing
``cache`` entry is never overwritten. Triton's ``run`` then finds the key, benchmarks nothing, and
launches that config, which the ``compile`` wrapper answers. A key not shipped (other shapes,
dtypes, GPU, or keyword order: Triton's key follows the call's argument order) is autotuned by Triton.
The wrapper answers an autotuner once: its first call gives it Triton's own ``run`` back as an instance attribute
(until the enabled indexes change), and wraps its ``_bench``, which Triton calls only to benchmark a key missing
from its cache: that key is counted as autotuned (:mod:`kbuild.runtime.coverage`), and is an error under
``KBUILD_RUNTIME=strict``.

Everything here runs once per specialisation (a compile Triton is about to make) or per autotuner: a later call is
Triton's own. Each decision is counted in the coverage report, with the reason of a miss and where the nearest
shipped entry differs (:func:`kbuild.runtime.lookup.nearest`); under ``KBUILD_RUNTIME=strict`` a compile the wheel
does not answer raises :class:`~kbuild.runtime.coverage.CoverageError` before Triton compiles.

Triton's launcher (``driver.active.launcher_cls``) and its ``cuda_utils`` module are C code compiled with
the host compiler on first use (``triton/runtime/build.py`` ``compile_module_from_src``), 0.6 s of a 0.78 s
first call on the H200 with an empty Triton cache: the kernels :func:`shipped_kernel` finds are launched without
them (:func:`kbuild.runtime.direct.make_direct`); with ``KBUILD_RUNTIME_LAUNCH=triton`` Triton's launcher runs them.
``benchmarks/gpu_runtime_coldstart.py`` measures both cases.
"""

from __future__ import annotations

import json
import logging
import types
from collections.abc import Mapping, Sequence
from typing import Any

from kbuild.runtime import coverage, keys
from kbuild.runtime.coverage import CoverageError
from kbuild.runtime.lookup import Miss, autotune_choices, before_compile
from kbuild.runtime.state import STATE, Event, function_name, runtime_disabled, strict
from kbuild.runtime.verify import REFUSED, Refused

log = logging.getLogger("kbuild.runtime")


# ----------------------------------------------------------------------------------------------
# Installation


def install() -> None:
    """Install the ``jit_cache_hook`` and the autotuner answer (idempotent; another hook is kept and chained)."""
    from triton import knobs
    from triton.runtime.autotuner import Autotuner

    with STATE.lock:
        if knobs.runtime.jit_cache_hook is not cache_hook:
            STATE.previous_cache_hook = knobs.runtime.jit_cache_hook
            knobs.runtime.jit_cache_hook = cache_hook
        if Autotuner.run is not _autotuner_run:
            STATE.original_autotuner_run = Autotuner.run
            Autotuner.run = _autotuner_run  # type: ignore[method-assign]
        STATE.loader_installed = True


def uninstall() -> None:
    """Remove both (compile slots already wrapped delegate to Triton once no package is enabled)."""
    if not STATE.loader_installed:
        return
    from triton import knobs
    from triton.runtime.autotuner import Autotuner

    with STATE.lock:
        if knobs.runtime.jit_cache_hook is cache_hook:
            knobs.runtime.jit_cache_hook = STATE.previous_cache_hook
        if Autotuner.run is _autotuner_run and STATE.original_autotuner_run is not None:
            Autotuner.run = STATE.original_autotuner_run  # type: ignore[method-assign]
        STATE.previous_cache_hook = None
        STATE.original_autotuner_run = None
        STATE.loader_installed = False


def cache_hook(*, key: Any, repr: Any, fn: Any, compile: Any, is_manual_warmup: bool,
               already_compiled: bool) -> Any:
    """Triton's ``jit_cache_hook``: wrap the compile slot of a function with shipped entries (zero-JIT), or count a
    compile kbuild cannot answer (no shipped entry with Triton's metadata for the function; under
    ``KBUILD_RUNTIME=strict`` an error, unless the hook that was there before, called next, skips the compile)."""
    unanswered: str | None = None
    try:
        if not runtime_disabled():
            jit = fn.jit_function
            function = function_name(jit)
            if STATE.candidates(function, "triton_metadata"):
                current = jit.__dict__.get("compile")
                if current is not None and not isinstance(current, ShippedCompile):
                    jit.compile = ShippedCompile(current)
            else:
                unanswered = _count_unanswered(jit, function, compile)
    except Exception:  # never break the user's kernel launch
        log.debug("jit_cache_hook failed; Triton compiles as usual", exc_info=True)
    previous = STATE.previous_cache_hook
    skip = False
    if previous is not None:
        skip = previous(key=key, repr=repr, fn=fn, compile=compile, is_manual_warmup=is_manual_warmup,
                        already_compiled=already_compiled)
    if unanswered is not None and not skip and strict():
        raise CoverageError(unanswered)
    return skip


def _count_unanswered(jit: Any, function: str, compile_info: Mapping[str, Any]) -> str:
    """Count a compile of ``function``, which has no zero-JIT entry, and return the strict-mode message for it."""
    package = STATE.package_of(function)
    shipped = STATE.candidates(function)
    module = function.partition(":")[0]
    if shipped:
        reason = (f"its {len(shipped)} shipped entr{'y has' if len(shipped) == 1 else 'ies have'} no Triton "
                  "metadata (index version 1): every call compiles, then the cubin is swapped")
    elif package is not None:
        reason = f"package {package} ships no entry for this function"
    else:
        reason = f"no enabled package ships kernels of {module} (package {module.partition('.')[0]} ships no " \
                 "kbuild index, or was not imported)"
    spec: dict[str, Any] | str
    try:
        call = keys.specialization_from_hook(jit, compile_info, cc=keys.current_cc(compile_info.get("device")),
                                             triton_version=keys.current_triton_version())
        spec = coverage.describe(call)
    except Exception:  # a call kbuild cannot describe is still counted
        spec = {"target": None, "signature": {str(k): str(v) for k, v in dict(compile_info.get("signature") or {})
                                              .items()}, "constexprs": {}, "options": {}}
    if not shipped:  # the post-compile substitution counts the rest
        STATE.coverage.specialization(function, spec, hit=False, package=package, reason=reason)
    return coverage.strict_message(function, spec, "compile", reason)


class ShippedCompile:
    """Stands in ``JITFunction.compile``: the shipped kernel for an exactly matching call, else Triton's compile."""

    def __init__(self, original: Any) -> None:
        self.original = original

    def __call__(self, src: Any, target: Any = None, options: Any = None, **kwargs: Any) -> Any:
        try:
            kernel = shipped_kernel(src, target, options or {})
        except CoverageError:
            raise
        except Exception as exc:  # never break the user's kernel launch
            log.debug("shipped-kernel lookup failed; Triton compiles", exc_info=True)
            STATE.fallback(function_name(src.fn), f"lookup failed: {type(exc).__name__}: {exc}")
            if strict():
                raise CoverageError(coverage.strict_message(function_name(src.fn), "this call", "compile",
                                                            f"the lookup failed: {type(exc).__name__}: {exc}")) from None
            kernel = None
        if kernel is not None:
            return kernel
        return self.original(src, target=target, options=options, **kwargs)


# ----------------------------------------------------------------------------------------------
# The answer


def shipped_kernel(src: Any, target: Any, options: Mapping[str, Any]) -> Any | None:
    """The shipped ``CompiledKernel`` for what Triton is about to compile, or None (Triton compiles), counted in
    the coverage; under ``KBUILD_RUNTIME=strict`` a miss raises :class:`~kbuild.runtime.coverage.CoverageError`.
    The kernel launches directly (:func:`kbuild.runtime.direct.make_direct`) unless ``KBUILD_RUNTIME_LAUNCH=triton``."""
    from kbuild.runtime.direct import make_direct
    from kbuild.runtime.handover import KernelPayload, kernel_from_payload

    if runtime_disabled():
        return None
    function = function_name(src.fn)
    candidates = STATE.candidates(function, "triton_metadata")
    if not candidates:
        return None
    found = before_compile(candidates, src, target, options)
    if isinstance(found, Miss):
        _miss(function, found.reason, found, len(candidates))
        return None
    try:
        cubin = STATE.verified_cubin(found.shipped, call=found.expected)
    except Refused as exc:
        _miss(function, f"{REFUSED}: {exc}", found, len(candidates))
        return None
    entry = found.shipped.entry
    md = entry["triton_metadata"]
    payload = KernelPayload(name=str(md["name"]), cubin=cubin, metadata_json=json.dumps(md),
                            hash=str(md.get("hash") or entry["cubin_sha256"]))
    kernel = kernel_from_payload(src, payload)
    kernel.kbuild_entry = found.shipped.key  # the post-compile hook leaves it alone
    reason = "zero-JIT: shipped cubin loaded without compiling"
    serves = entry.get("serves_call")
    if serves:  # issue 35 part 3: the tuned options answer a call that asks for the default's
        from kbuild.declarations.space import SERVED_CONSTEXPRS

        served = sorted(k for k in serves if k != SERVED_CONSTEXPRS)
        tuned = ", ".join(f"{k}={md.get(k)!r}" for k in served)
        asked = ", ".join([f"{k}={serves[k]!r}" for k in served] +
                          [f"{k}={v!r}" for k, v in sorted((serves.get(SERVED_CONSTEXPRS) or {}).items())])
        shown = f" (other {', '.join(sorted(serves[SERVED_CONSTEXPRS]))} shown safe by the build's output check)" \
            if serves.get(SERVED_CONSTEXPRS) else ""
        reason += f"; the tuned configuration ({tuned or 'its constexprs'}){shown} serves this call, which asks {asked}"
    STATE.record(Event.of_entry(function, found.shipped, substituted=True, reason=reason, stage="zero-jit"))
    if found.call is not None:
        STATE.coverage.specialization(function, coverage.describe(found.call), hit=True,
                                      package=found.shipped.index.package, shipped=len(candidates),
                                      stage="zero-jit", entry=found.shipped.key)
    return make_direct(kernel)


def _miss(function: str, reason: str, found: Any, shipped: int) -> None:
    """A call the wheel does not answer: logged once, counted, and under strict mode an error."""
    STATE.fallback(function, reason)
    call = getattr(found, "call", None)
    spec: dict[str, Any] | str = coverage.describe(call) if call is not None else "this call"
    close = getattr(found, "nearest", None)
    STATE.coverage.specialization(function, spec if isinstance(spec, dict) else {"target": None}, hit=False,
                                  package=STATE.package_of(function), shipped=shipped, reason=reason,
                                  nearest=coverage.nearest_of(close, getattr(found, "differences", ())))
    if strict():
        raise CoverageError(coverage.strict_message(function, spec, "compile", reason))


# ----------------------------------------------------------------------------------------------
# @triton.autotune


def _autotuner_run(self: Any, *args: Any, **kwargs: Any) -> Any:
    """Stands in ``Autotuner.run`` for an autotuner's first call: put the shipped choices into its cache, watch
    its benchmarking (coverage; strict mode), and give the autotuner Triton's own ``run`` back (its instance
    attribute) for every later call, until the enabled indexes change."""
    original = STATE.original_autotuner_run
    if original is None:  # uninstalled while this call was on its way
        from triton.runtime.autotuner import Autotuner

        original = Autotuner.run
    try:
        answer_autotuner(self)
        watch_benchmarks(self)
    except Exception:  # never break the user's kernel launch
        log.debug("autotuner answer failed; Triton autotunes as usual", exc_info=True)
    if getattr(original, "__qualname__", "") == "Autotuner.run":
        with STATE.lock:
            self.run = types.MethodType(original, self)
            STATE.answered_tuners.add(self)
    return original(self, *args, **kwargs)


def watch_benchmarks(tuner: Any) -> None:
    """Wrap the autotuner's ``_bench`` (its instance attribute), which Triton 3.6's ``Autotuner.run`` calls only to
    benchmark a key that is not in its cache: the key is counted as autotuned, with why no shipped choice answered
    it, and under ``KBUILD_RUNTIME=strict`` the benchmark is an error."""
    bench = getattr(tuner, "_bench", None)
    if not callable(bench) or getattr(bench, "kbuild_watch", False):
        return

    def _bench(*args: Any, config: Any, **meta: Any) -> Any:
        if not STATE.loader_installed or runtime_disabled():
            return bench(*args, config=config, **meta)
        message = _count_autotuned(tuner, meta)
        if message is not None and strict():
            raise CoverageError(message)
        return bench(*args, config=config, **meta)

    _bench.kbuild_watch = True  # type: ignore[attr-defined]
    tuner._bench = _bench


def _tuning_key(tuner: Any, meta: Mapping[str, Any]) -> tuple[tuple[Any, ...], list[str]]:
    """The autotuning key of the call being benchmarked, as Triton 3.6's ``Autotuner.run`` builds it, and the name
    of each of its parts."""
    all_args = {**(tuner.nargs or {}), **meta}
    args = {k: v for k, v in all_args.items() if k in tuner.arg_names}
    names = [k for k in tuner.keys if k in args]
    key = [args[k] for k in names]
    for name, arg in args.items():
        if hasattr(arg, "dtype"):
            key.append(str(arg.dtype))
            names.append(f"{name}.dtype")
    return tuple(key), names


def _count_autotuned(tuner: Any, meta: Mapping[str, Any]) -> str | None:
    """Count the key being autotuned (once per key); the strict-mode message the first time, else None."""
    jit = _jit_of(getattr(tuner, "fn", None))
    if jit is None:
        return None
    function = function_name(jit)
    key, names = _tuning_key(tuner, meta)
    arch = keys.current_cc()
    target = f"sm_{arch}"
    shipped = [c for c in STATE.candidates(function, "autotune")
               if c.entry["target"].get("cc") == arch and c.entry["triton_version"] == keys.current_triton_version()]
    near: dict[str, Any] | None = None
    if shipped:
        best = min(shipped, key=lambda c: len(_key_differences(key, c.entry["autotune"]["key"], names)))
        diffs = _key_differences(key, best.entry["autotune"]["key"], names)
        near = coverage.nearest_of(best, diffs)
        where = "; ".join(diffs[:3]) or "nothing (its config is not among the autotuner's)"
        reason = (f"no shipped choice for this key; the nearest shipped key {tuple(best.entry['autotune']['key'])} "
                  f"differs in {where}")
    elif STATE.candidates(function):
        reason = f"no entry of this function ships an autotuning choice for {target} and Triton " \
                 f"{keys.current_triton_version()}"
    else:
        package = STATE.package_of(function)
        reason = (f"package {package} ships no entry for this function" if package is not None else
                  f"no enabled package ships kernels of {function.partition(':')[0]}")
    new = STATE.coverage.autotune(function, key, answered=False, target=target, package=STATE.package_of(function),
                                  shipped=len(STATE.candidates(function)), reason=reason, nearest=near)
    if not new:
        return None
    STATE.fallback(function, f"autotuning key {key}: {reason}")
    return coverage.strict_message(function, f"key {key} on {target}", "autotune", reason)


def _key_differences(call: Sequence[Any], shipped: Sequence[Any], names: Sequence[str]) -> list[str]:
    out = [f"{names[i] if i < len(names) else i}: call {a!r}, shipped {b!r}"
           for i, (a, b) in enumerate(zip(call, shipped)) if a != b]
    if len(call) != len(shipped):
        out.append(f"length: call {len(call)}, shipped {len(shipped)}")
    return out


def _jit_of(obj: Any) -> Any:
    from triton.runtime.jit import JITFunction

    seen = 0
    while not isinstance(obj, JITFunction) and hasattr(obj, "fn") and seen < 8:  # Heuristics over a JITFunction
        obj, seen = obj.fn, seen + 1
    return obj if isinstance(obj, JITFunction) else None


def answer_autotuner(tuner: Any, *, arch: int | None = None) -> int:
    """Put the shipped choices for this GPU (``arch``: default the current device's) into ``tuner.cache``.

    Done once per autotuner and set of enabled packages; returns how many keys it answered."""
    if runtime_disabled():
        return 0
    jit = _jit_of(getattr(tuner, "fn", None))
    if jit is None:
        return 0
    function = function_name(jit)
    candidates = STATE.candidates(function, "autotune")
    if not candidates:
        return 0
    with STATE.lock:
        generation = STATE.generation
    if tuner.__dict__.get("_kbuild_answered") == generation:
        return 0
    tuner._kbuild_answered = generation
    if arch is None:
        arch = keys.current_cc()
    answered = 0
    for choice in autotune_choices(candidates, tuner.configs, arch=arch, triton_version=keys.current_triton_version()):
        if isinstance(choice, Miss):
            STATE.fallback(function, choice.reason)
            continue
        if choice.key in tuner.cache:
            continue
        tuner.cache[choice.key] = choice.config
        answered += 1
        STATE.record(Event.of_entry(function, choice.shipped, substituted=True,
                                    reason=f"autotune: shipped choice for key {choice.key}", stage="autotune"))
        STATE.coverage.autotune(function, choice.key, answered=True, target=f"sm_{arch}",
                                package=choice.shipped.index.package, shipped=len(candidates),
                                entry=choice.shipped.key)
    return answered


STATE.cache_hook = cache_hook  # kbuild's own hook, as :mod:`kbuild.runtime.direct` tells it from another's


__all__ = ["ShippedCompile", "answer_autotuner", "cache_hook", "install", "shipped_kernel", "uninstall",
           "watch_benchmarks"]
