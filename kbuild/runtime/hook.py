"""The post-compile substitution: tuned cubins swapped in when Triton's JIT compiles or loads a matching kernel.

Where it plugs in: ``triton.knobs.runtime.jit_post_compile_hook``. Triton 3.6 calls it from
``JITFunction._do_compile`` right after ``triton.compile`` returned a ``CompiledKernel`` and put it
into the function's in-memory kernel cache, for a fresh compile and for a hit in Triton's disk
cache alike (also under ``AsyncCompileMode`` and ``preload``), and always before the kernel's
first launch. At that point the ``CompiledKernel`` holds its cubin in ``.kernel`` and
``.asm["cubin"]``, and ``_init_handles`` has not yet given those bytes to the driver
(``.module is None``). The hook:

1. finds the index entries of the function (``module:qualname``) in the enabled packages
   (:meth:`kbuild.runtime.state.RuntimeState.candidates`);
2. asks the lookup (:func:`kbuild.runtime.lookup.after_compile`): it maps Triton's specialisation of the
   call onto kbuild's declaration notation and computes the baseline key exactly as the build does
   (:mod:`kbuild.runtime.keys`), with this device's compute capability (from the compiled kernel's
   target) and this Triton's version, and on an entry with that key checks the compiled kernel's
   symbol, shared memory, warps, CTAs and scratch size against the entry;
3. reads the cubin (size, sha256) and compares its ELF with the entry and with the cubin Triton just
   compiled (:meth:`~kbuild.runtime.state.RuntimeState.verified_cubin`, :mod:`kbuild.runtime.verify`:
   architecture, symbol, parameter layout, block size, shared-memory use; and no other entry of another
   key names it);
4. only then replaces ``.kernel`` and ``.asm["cubin"]``; Triton then loads the tuned cubin.

Any mismatch, any unsupported argument, any error: nothing is changed and Triton's own cubin runs.
A cubin refused by :mod:`kbuild.runtime.verify` is logged as a warning (the package data is damaged or
was edited); every other refusal and every substitution is logged once at debug level on the
``kbuild.runtime`` logger.
``KBUILD_RUNTIME=off`` (or 0/false/no; the settings' ``runtime`` field) disables
:func:`kbuild.runtime.enable` and the hook itself; a value that is neither true nor false disables them too, with
one warning naming the variable (:func:`kbuild.runtime.state.runtime_disabled`).

A hook already installed by someone else is kept and called after this one.

Since issue 16 this post-compile substitution is the fallback: :func:`kbuild.runtime.enable` also installs the
zero-JIT loader (:mod:`kbuild.runtime.loader`), which answers an exactly matching call before
Triton compiles anything, from the Triton metadata that version 2 indexes carry. A kernel it
loaded is marked (``kbuild_entry``) and left alone here; entries without that metadata (version 1
indexes, artefacts that did not record it) and kernels the loader declined go through this hook.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kbuild.runtime import coverage
from kbuild.runtime.lookup import Miss, after_compile
from kbuild.runtime.state import STATE, Event, function_name, runtime_disabled
from kbuild.runtime.verify import REFUSED, Refused

log = logging.getLogger("kbuild.runtime")


def install() -> None:
    """Put :func:`post_compile_hook` into ``triton.knobs.runtime.jit_post_compile_hook`` (idempotent; a hook that
    was there is kept and called after this one). Raises when Triton is missing or has no such hook."""
    from triton import knobs

    with STATE.lock:
        current = knobs.runtime.jit_post_compile_hook
        if current is post_compile_hook:
            STATE.post_compile_installed = True
            return
        STATE.previous_post_compile_hook = current
        knobs.runtime.jit_post_compile_hook = post_compile_hook
        STATE.post_compile_installed = True


def uninstall() -> None:
    """Put back the hook that was there before :func:`install`."""
    if not STATE.post_compile_installed:
        return
    from triton import knobs

    if knobs.runtime.jit_post_compile_hook is post_compile_hook:
        knobs.runtime.jit_post_compile_hook = STATE.previous_post_compile_hook
    STATE.previous_post_compile_hook = None
    STATE.post_compile_installed = False


def post_compile_hook(*, key: Any, repr: Any, fn: Any, compile: Any, is_manual_warmup: bool,
                      already_compiled: bool) -> Any:
    """Triton's ``jit_post_compile_hook``: substitute the shipped cubin, then call the hook that was there before."""
    try:
        _on_compiled(key, fn, compile)
    except Exception:  # never break the user's kernel launch
        log.debug("hook failed; Triton's own cubin is used", exc_info=True)
    previous = STATE.previous_post_compile_hook
    if previous is not None:
        return previous(key=key, repr=repr, fn=fn, compile=compile, is_manual_warmup=is_manual_warmup,
                        already_compiled=already_compiled)
    return None


def _on_compiled(key: Any, fn: Any, compile_info: Mapping[str, Any]) -> None:
    if runtime_disabled():
        return
    jit = fn.jit_function
    function = function_name(jit)
    candidates = STATE.candidates(function)
    if not candidates:
        return
    kernel = jit.device_caches[compile_info["device"]][0].get(key)
    if kernel is None or not hasattr(kernel, "asm") or not hasattr(kernel, "metadata"):
        STATE.record(Event(function, False, "no compiled kernel in Triton's cache for this call"))
        return
    if getattr(kernel, "kbuild_entry", None) is not None:  # loaded by kbuild.runtime.loader: nothing to swap
        return
    if getattr(kernel, "module", None) is not None:
        STATE.record(Event(function, False, "the kernel is already loaded"))
        return
    found = after_compile(candidates, jit, compile_info, kernel)
    if isinstance(found, Miss):
        if found.shipped is not None:
            STATE.record(Event.of_entry(function, found.shipped, substituted=False, reason=found.reason))
        else:
            STATE.record(Event(function, False, found.reason, target=found.target))
        _count(function, found, len(candidates), hit=False, reason=found.reason)
        return
    try:
        cubin = STATE.verified_cubin(found.shipped, call=found.expected)
    except Refused as exc:
        STATE.record(Event.of_entry(function, found.shipped, substituted=False, reason=f"{REFUSED}: {exc}"))
        _count(function, found, len(candidates), hit=False, reason=f"{REFUSED}: {exc}")
        return
    kernel.kernel = cubin
    kernel.asm["cubin"] = cubin
    kernel.asm.pop("sass", None)  # AsmDict recomputes it from the new cubin on demand
    STATE.record(Event.of_entry(function, found.shipped, substituted=True, reason="key, checks and digest match",
                                stage="post-compile"))
    _count(function, found, len(candidates), hit=True)


def _count(function: str, found: Any, shipped: int, *, hit: bool, reason: str | None = None) -> None:
    """The coverage of a compiled specialisation: its shipped cubin swapped in (a hit of stage ``post-compile``:
    Triton compiled, the cubin is the wheel's) or not."""
    if found.call is None:
        return
    entry = found.shipped if hit else None
    STATE.coverage.specialization(function, coverage.describe(found.call), hit=hit,
                                  package=STATE.package_of(function), shipped=shipped,
                                  stage="post-compile" if hit else None, entry=entry.key if entry else None,
                                  reason=reason, nearest=coverage.nearest_of(getattr(found, "nearest", None),
                                                                             getattr(found, "differences", ())))


STATE.post_compile_hook = post_compile_hook  # kbuild's own hook, as :mod:`kbuild.runtime.direct` tells it from another's


__all__ = ["install", "post_compile_hook", "uninstall"]
