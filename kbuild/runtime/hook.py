"""The run-time hook: substitute tuned cubins when Triton's JIT compiles or loads a matching kernel.

Where it plugs in: ``triton.knobs.runtime.jit_post_compile_hook``. Triton 3.6 calls it from
``JITFunction._do_compile`` right after ``triton.compile`` returned a ``CompiledKernel`` and put it
into the function's in-memory kernel cache, for a fresh compile and for a hit in Triton's disk
cache alike (also under ``AsyncCompileMode`` and ``preload``), and always before the kernel's
first launch. At that point the ``CompiledKernel`` holds its cubin in ``.kernel`` and
``.asm["cubin"]``, and ``_init_handles`` has not yet given those bytes to the driver
(``.module is None``). The hook:

1. finds the index entries of the function (``module:qualname``) in the enabled packages;
2. maps Triton's specialisation of the call onto kbuild's declaration notation and computes the
   baseline key exactly as the build does (:mod:`kbuild.runtime.keys`), with this device's compute
   capability (from the compiled kernel's target) and this Triton's version;
3. on an entry with that key, checks the compiled kernel's symbol, shared memory, warps, CTAs and
   scratch size against the entry, reads the cubin (size, sha256) and compares its ELF with the entry
   and with the cubin Triton just compiled (:mod:`kbuild.runtime.verify`: architecture, symbol,
   parameter layout, block size, shared-memory use; and no other entry of another key names it);
4. only then replaces ``.kernel`` and ``.asm["cubin"]``; Triton then loads the tuned cubin.

Any mismatch, any unsupported argument, any error: nothing is changed and Triton's own cubin runs.
A cubin refused by :mod:`kbuild.runtime.verify` is logged as a warning (the package data is damaged or
was edited); every other refusal and every substitution is logged once at debug level on the
``kbuild.runtime`` logger.
``KBUILD_RUNTIME=off`` (or 0/false/no; the settings' ``runtime`` field) disables :func:`enable` and the hook
itself; a value that is neither true nor false disables them too, with one warning naming the variable.

A hook already installed by someone else is kept and called after this one.

Since issue 16 this post-compile substitution is the fallback: :func:`enable` also installs the
zero-JIT loader (:mod:`kbuild.runtime.loader`), which answers an exactly matching call before
Triton compiles anything, from the Triton metadata that version 2 indexes carry. A kernel it
loaded is marked (``kbuild_entry``) and left alone here; entries without that metadata (version 1
indexes, artefacts that did not record it) and kernels the loader declined go through this hook.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kbuild.canonical import canonical_json
from kbuild.config import env_setting
from kbuild.errors import ConfigError
from kbuild.runtime.index import CHECK_FIELDS, DATA_DIR, INDEX_FILE, Index, load_index
from kbuild.runtime.verify import Expected, Refused, cubin_mismatch, read_cubin

log = logging.getLogger("kbuild.runtime")

#: Environment variable that turns the run-time substitution off (``off``, ``0``, ``false``, ``no``): the
#: settings' ``runtime`` field (:mod:`kbuild.config`).
RUNTIME_ENV = "KBUILD_RUNTIME"

_MAX_EVENTS = 1000


def runtime_disabled() -> bool:
    """Whether ``KBUILD_RUNTIME`` turns the substitution off. A bad value (neither true nor false) does too, with a
    warning once: Triton's own cubins are always correct, and the hook never fails a package's import."""
    try:
        return not env_setting("runtime")
    except ConfigError as exc:
        with _state.lock:
            once = (RUNTIME_ENV, str(exc))
            if once not in _state.logged:
                _state.logged.add(once)
                log.warning("%s; tuned cubins are not substituted", exc)
        return True


@dataclass(frozen=True)
class Event:
    """One decision of the hook about one compiled kernel."""

    function: str
    substituted: bool
    reason: str
    key: str | None = None
    package: str | None = None
    kernel: str | None = None
    target: str | None = None
    tuned: bool | None = None
    speedup: float | None = None
    cubin_sha256: str | None = None
    stage: str | None = None
    """``"zero-jit"`` (loaded without compiling), ``"autotune"`` (the autotuner answered), ``"post-compile"``."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _State:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.indexes: dict[str, Index] = {}
        self.by_function: dict[str, list[tuple[Index, str, dict[str, Any]]]] = {}
        self.installed = False
        self.previous: Any = None
        self.cubins: dict[tuple[str, str], bytes] = {}
        self.events: list[Event] = []
        self.logged: set[tuple[str, str]] = set()
        self.generation = 0
        """Bumped whenever the enabled indexes change (autotuners are answered again)."""

    def rebuild(self) -> None:
        by_function: dict[str, list[tuple[Index, str, dict[str, Any]]]] = {}
        for index in self.indexes.values():
            for function, items in index.by_function().items():
                by_function.setdefault(function, []).extend((index, key, entry) for key, entry in items)
        self.by_function = by_function
        self.generation += 1


_state = _State()


# ----------------------------------------------------------------------------------------------
# Public API


def enable(package: str, *, data_dir: str | Path | None = None) -> bool:
    """Substitute the tuned cubins shipped in ``package`` (its ``_kbuild/index.json``) from now on.

    ``data_dir`` is the folder holding ``index.json`` (default: ``<package dir>/_kbuild``, found
    without importing the package again). Returns whether the hook is active for the package;
    False (with a debug log line) when ``KBUILD_RUNTIME=off``, when the package ships no index, or
    when the index is unreadable (a warning). Never raises for those; calling it twice is harmless."""
    if runtime_disabled():
        log.debug("%s=off: not enabling tuned cubins for %s", RUNTIME_ENV, package)
        return False
    folder = Path(data_dir) if data_dir is not None else _package_data_dir(package)
    if folder is None or not (folder / INDEX_FILE).is_file():
        log.debug("%s ships no %s/%s: Triton's own cubins are used", package, DATA_DIR, INDEX_FILE)
        return False
    try:
        index = load_index(folder / INDEX_FILE)
    except Exception as exc:  # a damaged index must not break the package's import
        log.warning("ignoring the tuned cubins of %s: %s", package, exc)
        return False
    try:
        _install()
    except Exception as exc:  # no triton, or a Triton without the hook
        log.debug("cannot hook into Triton (%s): Triton's own cubins are used", exc)
        return False
    with _state.lock:
        _state.indexes[package] = index
        _state.rebuild()
    log.debug("enabled %d tuned cubin(s) of %s from %s", len(index.entries), package, folder)
    return True


def disable(package: str | None = None) -> None:
    """Stop substituting for ``package`` (all packages when None); the hook goes when none is left.

    Kernels already substituted keep their cubin (Triton may have loaded it)."""
    with _state.lock:
        if package is None:
            _state.indexes.clear()
        else:
            _state.indexes.pop(package, None)
        _state.rebuild()
        if not _state.indexes:
            _uninstall()


def enabled_packages() -> list[str]:
    with _state.lock:
        return sorted(_state.indexes)


def events() -> list[Event]:
    """The hook's decisions so far (at most the last 1000), oldest first."""
    with _state.lock:
        return list(_state.events)


def substitutions() -> list[Event]:
    """The kernels whose cubin was replaced by a shipped one."""
    return [e for e in events() if e.substituted]


def reset_events() -> None:
    with _state.lock:
        _state.events.clear()
        _state.logged.clear()
    from kbuild.runtime.loader import reset_fallback_log

    reset_fallback_log()


# ----------------------------------------------------------------------------------------------
# Installation


def _package_data_dir(package: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        if (Path(loc) / DATA_DIR / INDEX_FILE).is_file():
            return Path(loc) / DATA_DIR
    return None


def _install() -> None:
    from triton import knobs

    with _state.lock:
        current = knobs.runtime.jit_post_compile_hook
        if current is _post_compile_hook:
            _state.installed = True
            return
        _state.previous = current
        knobs.runtime.jit_post_compile_hook = _post_compile_hook
        _state.installed = True
    try:
        from kbuild.runtime import loader

        loader.install()
    except Exception as exc:  # the post-compile substitution still works
        log.debug("cannot install the zero-JIT loader (%s): kernels are compiled, then substituted", exc)


def _uninstall() -> None:
    if not _state.installed:
        return
    from triton import knobs

    from kbuild.runtime import loader

    loader.uninstall()

    if knobs.runtime.jit_post_compile_hook is _post_compile_hook:
        knobs.runtime.jit_post_compile_hook = _state.previous
    _state.previous = None
    _state.installed = False


def _post_compile_hook(*, key: Any, repr: Any, fn: Any, compile: Any, is_manual_warmup: bool,
                       already_compiled: bool) -> Any:
    try:
        _on_compiled(key, fn, compile)
    except Exception:  # never break the user's kernel launch
        log.debug("hook failed; Triton's own cubin is used", exc_info=True)
    previous = _state.previous
    if previous is not None:
        return previous(key=key, repr=repr, fn=fn, compile=compile, is_manual_warmup=is_manual_warmup,
                        already_compiled=already_compiled)
    return None


# ----------------------------------------------------------------------------------------------
# The decision


def _record(event: Event) -> None:
    with _state.lock:
        _state.events.append(event)
        del _state.events[:-_MAX_EVENTS]
        once = (event.function, f"{event.key}:{event.substituted}:{event.reason}")
        if once in _state.logged:
            return
        _state.logged.add(once)
    if event.substituted:
        speed = f" ×{event.speedup:.3f}" if event.speedup is not None else ""
        log.debug("substituted %s cubin for %s [%s] from %s (kernel %s, key %s, sha256 %s, %s)%s",
                  "tuned" if event.tuned else "shipped", event.function, event.target, event.package, event.kernel,
                  (event.key or "")[:16], (event.cubin_sha256 or "")[:16], event.stage or "?", speed)
    elif event.reason.startswith(REFUSED):
        log.warning("%s: %s; Triton's own cubin is used", event.function, event.reason)
    else:
        log.debug("%s: no substitution: %s", event.function, event.reason)


def _on_compiled(key: Any, fn: Any, compile_info: Mapping[str, Any]) -> None:
    if runtime_disabled():
        return
    jit = fn.jit_function
    function = f"{jit.fn.__module__}:{jit.fn.__qualname__}"
    with _state.lock:
        candidates = list(_state.by_function.get(function, ()))
    if not candidates:
        return
    kernel = jit.device_caches[compile_info["device"]][0].get(key)
    if kernel is None or not hasattr(kernel, "asm") or not hasattr(kernel, "metadata"):
        _record(Event(function, False, "no compiled kernel in Triton's cache for this call"))
        return
    if getattr(kernel, "kbuild_entry", None) is not None:  # loaded by kbuild.runtime.loader: nothing to swap
        return
    if getattr(kernel, "module", None) is not None:
        _record(Event(function, False, "the kernel is already loaded"))
        return
    _decide(jit, kernel, compile_info, function, candidates)


def _decide(jit: Any, kernel: Any, compile_info: Mapping[str, Any], function: str,
            candidates: list[tuple[Index, str, dict[str, Any]]]) -> None:
    from kbuild.runtime.keys import current_triton_version, installed_distribution, specialization_from_hook

    target = kernel.metadata.target
    if getattr(target, "backend", None) != "cuda" or getattr(target, "warp_size", 32) != 32:
        _record(Event(function, False, f"target {target!r} is not an NVIDIA GPU"))
        return
    triton_version = current_triton_version()
    call = specialization_from_hook(jit, compile_info, cc=int(target.arch), triton_version=triton_version)
    if call.unsupported:
        _record(Event(function, False, f"call not declarable: {call.unsupported}"))
        return
    best: tuple[int, list[str]] | None = None
    for index, entry_key, entry in candidates:
        comps = entry["key_components"]
        mine = call.key(ptxas_version=comps["compiler"]["ptxas"], declared=entry.get("signature"),
                        distribution=installed_distribution(entry))
        if mine.hex != entry_key:
            diffs = sorted(_differences(json.loads(canonical_json(mine.components)), comps), key=_priority)
            if best is None or len(diffs) < best[0]:
                best = (len(diffs), diffs)
            continue
        _substitute(kernel, index, entry_key, entry, function)
        return
    detail = "; ".join(best[1][:4]) if best else "no entry"
    _record(Event(function, False, f"no index entry has this call's key ({detail})", target=call.target.arch))


def _substitute(kernel: Any, index: Index, key: str, entry: dict[str, Any], function: str) -> None:
    md = kernel.metadata
    base = {"function": function, "key": key, "package": index.package, "kernel": entry.get("kernel"),
            "target": entry["target"].get("arch"), "tuned": bool(entry.get("tuned"))}
    if getattr(md, "triton_version", None) != entry["triton_version"]:
        _record(Event(**base, substituted=False,
                      reason=f"kernel compiled by Triton {getattr(md, 'triton_version', None)}, "
                             f"entry by {entry['triton_version']}"))
        return
    checks: Mapping[str, Any] = entry.get("checks") or {}
    for name in CHECK_FIELDS:
        want = checks.get(name)
        have = getattr(md, name, None)
        if want is None or have is None:
            if name in ("name", "shared", "num_warps"):
                _record(Event(**base, substituted=False, reason=f"cannot check {name} (kernel {have!r}, entry {want!r})"))
                return
            continue
        if have != want:
            _record(Event(**base, substituted=False, reason=f"compiled kernel's {name} is {have!r}, entry says {want!r}"))
            return
    if not kernel.kernel or kernel.kernel[:4] != b"\x7fELF":
        _record(Event(**base, substituted=False, reason="Triton's kernel is not an ELF cubin"))
        return
    try:
        cubin = verified_cubin(index, key, entry, call=_expected_of(kernel.kernel, md))
    except Refused as exc:
        _record(Event(**base, substituted=False, reason=f"{REFUSED}: {exc}"))
        return
    kernel.kernel = cubin
    kernel.asm["cubin"] = cubin
    kernel.asm.pop("sass", None)  # AsmDict recomputes it from the new cubin on demand
    _record(Event(**base, substituted=True, reason="key, checks and digest match",
                  speedup=entry.get("speedup"), cubin_sha256=entry["cubin_sha256"], stage="post-compile"))


#: How a refusal of :func:`verified_cubin` starts in an :class:`Event` (logged as a warning).
REFUSED = "shipped cubin refused"


def verified_cubin(index: Index, key: str, entry: Mapping[str, Any], *, call: Expected | None = None) -> bytes:
    """The cubin of ``index``'s entry ``key``, checked (:mod:`kbuild.runtime.verify`): no other key names it, it
    is read within its recorded size with its sha256, and its ELF agrees with the entry and with ``call``.
    :class:`~kbuild.runtime.verify.Refused` says why not. The bytes are kept once their digest held."""
    conflict = index.conflicts.get(key)
    if conflict is not None:
        raise Refused(conflict)
    cache_key = (str(index.data_dir), str(entry["cubin_sha256"]))
    with _state.lock:
        data = _state.cubins.get(cache_key)
    if data is None:
        data = read_cubin(index.data_dir, entry)
        with _state.lock:
            _state.cubins[cache_key] = data
    problem = cubin_mismatch(data, entry, where=str(index.data_dir / str(entry["cubin"])), call=call)
    if problem is not None:
        raise Refused(problem)
    return data


def _expected_of(compiled: bytes, md: Any) -> Expected:
    """What the cubin Triton compiled for this call states (its parameters, architecture, name), for the shipped
    one to agree with; the parts that cannot be read are left unchecked."""
    from kbuild.errors import UsageError
    from kbuild.sass.elf import Cubin

    try:
        own = Cubin(compiled, "<Triton's cubin>")
        name = getattr(md, "name", None)
        params = [p.size for p in own.params(name)] if name in own.kernels() else None
        return Expected(cc=own.sm, params=params, num_warps=getattr(md, "num_warps", None), name=name)
    except UsageError:
        return Expected(num_warps=getattr(md, "num_warps", None), name=getattr(md, "name", None))


_ORDER = ("target", "compiler.triton", "kernel", "compiler.ptxas", "compiler")


def _priority(diff: str) -> int:
    """Most telling components first: the GPU, the Triton version, the call, then backend options."""
    return next((i for i, prefix in enumerate(_ORDER) if diff.startswith(prefix)), len(_ORDER))


def _differences(mine: Any, theirs: Any, path: str = "") -> list[str]:
    """Leaf paths where two key-component trees differ: ``"kernel.num_warps: call 8, index 4"``."""
    if isinstance(mine, dict) and isinstance(theirs, dict):
        out: list[str] = []
        for k in sorted(set(mine) | set(theirs)):
            sub = f"{path}.{k}" if path else str(k)
            if k not in mine or k not in theirs:
                out.append(f"{sub}: call {mine.get(k, '<absent>')!r}, index {theirs.get(k, '<absent>')!r}")
            else:
                out.extend(_differences(mine[k], theirs[k], sub))
        return out
    if mine != theirs or type(mine) is not type(theirs):
        return [f"{path}: call {mine!r}, index {theirs!r}"]
    return []


__all__ = ["RUNTIME_ENV", "Event", "disable", "enable", "enabled_packages", "events", "reset_events",
           "runtime_disabled", "substitutions"]
