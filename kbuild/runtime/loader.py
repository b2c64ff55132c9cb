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

So: the ``jit_cache_hook`` (:func:`_cache_hook`) sees every compile of every ``@triton.jit``
function before it happens; for a function that an enabled package ships cubins for, it wraps the
function's own ``compile`` slot once (:class:`ShippedCompile`) and returns False. The wrapper gets
exactly what ``triton.compile`` would get (the ``ASTSource``, the target, the options); when the
call's key (:func:`kbuild.runtime.keys.specialization_from_source`: signature types,
divisibility and 1-specialisation, constexprs, every backend option, the target's compute
capability, Triton's version) equals an index entry's, and the entry's recorded Triton metadata
agrees with the call's options and target, and the shipped cubin passes :func:`kbuild.runtime.hook.verified_cubin`
(read within its recorded size, sha256, its ELF against the entry and the call: architecture, symbol, parameter
layout, block size, shared-memory use; no other key names it), it returns a ``CompiledKernel`` rebuilt from the
shipped cubin and that metadata (:func:`kbuild.runtime.handover.kernel_from_payload`,
the same rebuild the tuner uses between processes). Triton then caches, hooks and launches it as
its own. Anything else calls Triton's ``compile`` unchanged (logged once per kernel), after which
the post-compile substitution of :mod:`kbuild.runtime.hook` still applies (version 1 indexes).

``@triton.autotune``: ``Autotuner.run`` (autotuner.py l.212-241) benchmarks every configuration when
the call's tuning key is not in ``self.cache``; there is no hook before that. :func:`install`
therefore wraps ``Autotuner.run`` (class attribute, restored by :func:`uninstall`): before Triton's
own ``run``, an autotuner over a shipped function gets ``cache[key] = config`` for each index entry
with an ``autotune`` key for this GPU and Triton version, where ``config`` is the autotuner's own
``triton.Config`` equal to the entry's (kwargs, warps, stages, CTAs, maxnreg, ptx_options: a ``triton.Config``
has none, so an entry compiled with extra ptxas flags is never an autotuner's answer); an existing
``cache`` entry is never overwritten. Triton's ``run`` then finds the key, benchmarks nothing, and
launches that config, which the ``compile`` wrapper answers. A key not shipped (other shapes,
dtypes, GPU, or keyword order: Triton's key follows the call's argument order) is autotuned by Triton.

Triton's launcher (``driver.active.launcher_cls``) and its ``cuda_utils`` module are C code compiled with
the host compiler on first use (``triton/runtime/build.py`` ``compile_module_from_src``), 0.6 s of a 0.78 s
first call on the H200 with an empty Triton cache: :mod:`kbuild.runtime.direct` launches the kernels this
module finds without them; with ``KBUILD_RUNTIME_LAUNCH=triton`` Triton's launcher runs them.
``benchmarks/gpu_runtime_coldstart.py`` measures both cases.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from kbuild.runtime.hook import Event, _record, _state, runtime_disabled, verified_cubin
from kbuild.runtime.index import CHECK_FIELDS, Index
from kbuild.runtime.verify import Expected, Refused, call_params

log = logging.getLogger("kbuild.runtime")

#: Backend options compared between the call and the shipped Triton metadata (besides the key).
_PATH_OPTIONS = ("extern_libs", "triton_env")


class _LoaderState:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.installed = False
        self.previous_cache_hook: Any = None
        self.original_autotuner_run: Any = None
        self.fallbacks_logged: set[str] = set()


_loader = _LoaderState()


def _function_name(jit: Any) -> str:
    return f"{jit.fn.__module__}:{jit.fn.__qualname__}"


def _candidates(function: str, field: str) -> list[tuple[Index, str, dict[str, Any]]]:
    with _state.lock:
        return [c for c in _state.by_function.get(function, ()) if field in c[2]]


def _fallback(function: str, reason: str, *, level: int = logging.INFO) -> None:
    """Log once per kernel that Triton's own path runs for it, and why (the first reason); a shipped cubin
    that failed its checks is a warning (``level``): the package data is damaged or was edited."""
    with _loader.lock:
        if function in _loader.fallbacks_logged:
            return
        _loader.fallbacks_logged.add(function)
    log.log(level, "%s: no shipped cubin for this call (%s); Triton compiles it", function, reason)


def reset_fallback_log() -> None:
    with _loader.lock:
        _loader.fallbacks_logged.clear()


# ----------------------------------------------------------------------------------------------
# Installation


def install() -> None:
    """Install the ``jit_cache_hook`` and the autotuner answer (idempotent; another hook is kept and chained)."""
    from triton import knobs
    from triton.runtime.autotuner import Autotuner

    with _loader.lock:
        if knobs.runtime.jit_cache_hook is not _cache_hook:
            _loader.previous_cache_hook = knobs.runtime.jit_cache_hook
            knobs.runtime.jit_cache_hook = _cache_hook
        if Autotuner.run is not _autotuner_run:
            _loader.original_autotuner_run = Autotuner.run
            Autotuner.run = _autotuner_run  # type: ignore[method-assign]
        _loader.installed = True
    from kbuild.runtime import direct

    direct.install()


def uninstall() -> None:
    """Remove both (compile slots already wrapped delegate to Triton once no package is enabled)."""
    if not _loader.installed:
        return
    from triton import knobs
    from triton.runtime.autotuner import Autotuner

    from kbuild.runtime import direct

    direct.uninstall()
    with _loader.lock:
        if knobs.runtime.jit_cache_hook is _cache_hook:
            knobs.runtime.jit_cache_hook = _loader.previous_cache_hook
        if Autotuner.run is _autotuner_run and _loader.original_autotuner_run is not None:
            Autotuner.run = _loader.original_autotuner_run  # type: ignore[method-assign]
        _loader.previous_cache_hook = None
        _loader.original_autotuner_run = None
        _loader.installed = False


def _cache_hook(*, key: Any, repr: Any, fn: Any, compile: Any, is_manual_warmup: bool,
                already_compiled: bool) -> Any:
    try:
        jit = fn.jit_function
        if not runtime_disabled() and _candidates(_function_name(jit), "triton_metadata"):
            current = jit.__dict__.get("compile")
            if current is not None and not isinstance(current, ShippedCompile):
                jit.compile = ShippedCompile(current)
    except Exception:  # never break the user's kernel launch
        log.debug("jit_cache_hook failed; Triton compiles as usual", exc_info=True)
    previous = _loader.previous_cache_hook
    if previous is not None:
        return previous(key=key, repr=repr, fn=fn, compile=compile, is_manual_warmup=is_manual_warmup,
                        already_compiled=already_compiled)
    return False


class ShippedCompile:
    """Stands in ``JITFunction.compile``: the shipped kernel for an exactly matching call, else Triton's compile."""

    def __init__(self, original: Any) -> None:
        self.original = original

    def __call__(self, src: Any, target: Any = None, options: Any = None, **kwargs: Any) -> Any:
        try:
            kernel = shipped_kernel(src, target, options or {})
        except Exception as exc:  # never break the user's kernel launch
            log.debug("shipped-kernel lookup failed; Triton compiles", exc_info=True)
            _fallback(_function_name(src.fn), f"lookup failed: {type(exc).__name__}: {exc}")
            kernel = None
        if kernel is not None:
            return kernel
        return self.original(src, target=target, options=options, **kwargs)


# ----------------------------------------------------------------------------------------------
# The decision


def _norm(value: Any) -> Any:
    return json.loads(json.dumps(value, default=vars))


def metadata_mismatch(md: Mapping[str, Any], options: Mapping[str, Any], arch: int, triton_version: str) -> str | None:
    """Why Triton metadata recorded at build time does not describe a compile with ``options`` for ``arch``
    (None when it does): the Triton version, the target and every option (paths aside) must be equal."""
    if md.get("triton_version") != triton_version:
        return f"shipped metadata is of Triton {md.get('triton_version')!r}, this is {triton_version!r}"
    target = md.get("target") or {}
    if target.get("backend") != "cuda" or target.get("arch") != arch or target.get("warp_size") != 32:
        return f"shipped metadata targets {target!r}, this GPU is cuda/{arch}"
    for name, value in _norm(dict(options)).items():
        if name in _PATH_OPTIONS:
            continue
        if name not in md:
            return f"option {name} is not in the shipped metadata"
        if _norm(md[name]) != value:
            return f"option {name} is {value!r}, shipped {md[name]!r}"
    return None


def _checks_mismatch(md: Mapping[str, Any], entry: Mapping[str, Any]) -> str | None:
    """The entry's ``checks`` (symbol, shared memory, warps, CTAs, scratch) must agree with its Triton metadata."""
    checks = entry.get("checks") or {}
    for name in CHECK_FIELDS:
        if checks.get(name) is not None and md.get(name) is not None and checks[name] != md[name]:
            return f"the entry's {name} is {checks[name]!r}, its Triton metadata says {md[name]!r}"
    return None


def shipped_kernel(src: Any, target: Any, options: Mapping[str, Any]) -> Any | None:
    """The shipped ``CompiledKernel`` for what Triton is about to compile, or None (Triton compiles)."""
    from kbuild.runtime.handover import KernelPayload, kernel_from_payload
    from kbuild.runtime.keys import current_triton_version, installed_distribution, specialization_from_source

    if runtime_disabled():
        return None
    jit = src.fn
    function = _function_name(jit)
    candidates = _candidates(function, "triton_metadata")
    if not candidates:
        return None
    if target is None or getattr(target, "backend", None) != "cuda" or getattr(target, "warp_size", 32) != 32:
        _fallback(function, f"target {target!r} is not an NVIDIA GPU")
        return None
    triton_version = current_triton_version()
    call = specialization_from_source(jit, src, options, cc=int(target.arch), triton_version=triton_version)
    if call.unsupported:
        _fallback(function, f"call not declarable: {call.unsupported}")
        return None
    for index, entry_key, entry in candidates:
        mine = call.key(ptxas_version=entry["key_components"]["compiler"]["ptxas"], declared=entry.get("signature"),
                        distribution=installed_distribution(entry))
        if mine.hex != entry_key:
            continue
        md = entry["triton_metadata"]
        problem = metadata_mismatch(md, options, int(target.arch), triton_version) or _checks_mismatch(md, entry)
        if problem is not None:
            _fallback(function, problem)
            return None
        expected = Expected(cc=int(target.arch), params=call_params(getattr(src, "signature", None) or {}),
                            num_warps=options.get("num_warps"), name=getattr(jit.fn, "__name__", None))
        try:
            cubin = verified_cubin(index, entry_key, entry, call=expected)
        except Refused as exc:
            _fallback(function, f"shipped cubin refused: {exc}", level=logging.WARNING)
            return None
        payload = KernelPayload(name=str(md["name"]), cubin=cubin, metadata_json=json.dumps(md),
                                hash=str(md.get("hash") or entry["cubin_sha256"]))
        kernel = kernel_from_payload(src, payload)
        kernel.kbuild_entry = entry_key  # the post-compile hook leaves it alone
        _record(Event(function, True, "zero-JIT: shipped cubin loaded without compiling", key=entry_key,
                      package=index.package, kernel=entry.get("kernel"), target=entry["target"].get("arch"),
                      tuned=bool(entry.get("tuned")), speedup=entry.get("speedup"),
                      cubin_sha256=entry["cubin_sha256"], stage="zero-jit"))
        return kernel
    _fallback(function, f"no shipped entry has this call's key (signature {call.signature}, constexprs "
                        f"{call.constexprs}, num_warps {call.options.get('num_warps')}, sm_{call.cc})")
    return None


# ----------------------------------------------------------------------------------------------
# @triton.autotune


def _autotuner_run(self: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        answer_autotuner(self)
    except Exception:  # never break the user's kernel launch
        log.debug("autotuner answer failed; Triton autotunes as usual", exc_info=True)
    original = _loader.original_autotuner_run
    if original is None:  # uninstalled while this call was on its way
        from triton.runtime.autotuner import Autotuner

        original = Autotuner.run
    return original(self, *args, **kwargs)


def _jit_of(obj: Any) -> Any:
    from triton.runtime.jit import JITFunction

    seen = 0
    while not isinstance(obj, JITFunction) and hasattr(obj, "fn") and seen < 8:  # Heuristics over a JITFunction
        obj, seen = obj.fn, seen + 1
    return obj if isinstance(obj, JITFunction) else None


def config_matches(config: Any, shipped: Mapping[str, Any]) -> bool:
    """Whether a ``triton.Config`` is the shipped ``config`` of an entry (its kwargs all among the entry's)."""
    kwargs = shipped.get("kwargs") or {}
    if any(name not in kwargs or _norm(value) != _norm(kwargs[name]) for name, value in config.kwargs.items()):
        return False
    return (config.num_warps == shipped.get("num_warps") and config.num_stages == shipped.get("num_stages")
            and config.num_ctas == shipped.get("num_ctas", 1) and config.maxnreg == shipped.get("maxnreg")
            and (getattr(config, "ptx_options", None) or None) == (shipped.get("ptx_options") or None))


def answer_autotuner(tuner: Any, *, arch: int | None = None) -> int:
    """Put the shipped choices for this GPU (``arch``: default the current device's) into ``tuner.cache``.

    Done once per autotuner and set of enabled packages; returns how many keys it answered."""
    if runtime_disabled():
        return 0
    jit = _jit_of(getattr(tuner, "fn", None))
    if jit is None:
        return 0
    function = _function_name(jit)
    candidates = _candidates(function, "autotune")
    if not candidates:
        return 0
    with _state.lock:
        generation = _state.generation
    if tuner.__dict__.get("_kbuild_answered") == generation:
        return 0
    tuner._kbuild_answered = generation
    if arch is None:
        from kbuild.runtime.direct import current_cc

        arch = current_cc()
    from kbuild.runtime.keys import current_triton_version

    triton_version = current_triton_version()
    answered = 0
    for index, entry_key, entry in candidates:
        if entry["target"].get("cc") != arch or entry["triton_version"] != triton_version:
            continue
        if entry_key in index.conflicts:  # a self-contradicting index chooses nothing for the autotuner
            _fallback(function, f"shipped cubin refused: {index.conflicts[entry_key]}", level=logging.WARNING)
            continue
        key = tuple(entry["autotune"]["key"])
        config = next((c for c in tuner.configs if config_matches(c, entry["config"])), None)
        if config is None:
            _fallback(function, f"the shipped config {entry['config']} of key {key} is not among the autotuner's")
            continue
        if key in tuner.cache:
            continue
        tuner.cache[key] = config
        answered += 1
        _record(Event(function, True, f"autotune: shipped choice for key {key}", key=entry_key, package=index.package,
                      kernel=entry.get("kernel"), target=entry["target"].get("arch"), tuned=bool(entry.get("tuned")),
                      speedup=entry.get("speedup"), cubin_sha256=entry["cubin_sha256"], stage="autotune"))
    return answered


__all__ = ["ShippedCompile", "answer_autotuner", "config_matches", "install", "metadata_mismatch", "reset_fallback_log",
           "shipped_kernel", "uninstall"]
