"""kbuild.runtime: tuned cubins for packages that run their Triton kernels just in time.

Build side (:mod:`kbuild.runtime.package`): for ``ship = "package-data"`` projects,
:func:`~kbuild.runtime.package.write_package_data` writes ``<package>/_kbuild/`` — the shipped
cubins as ``<sha256>.cubin``, an ``index.json`` keyed by each kernel's baseline key
(:mod:`kbuild.runtime.index`), and an ``__init__.py`` whose import calls :func:`enable`.

Run side (:mod:`kbuild.runtime.hook`): ``kbuild.runtime.enable("mypkg")`` (or
``import mypkg._kbuild``) installs Triton's ``jit_post_compile_hook``. When Triton has compiled, or
loaded from its cache, a kernel whose key (recomputed from Triton's specialisation:
:mod:`kbuild.runtime.keys`) matches an index entry for this GPU and Triton version, the verified
tuned cubin replaces Triton's before the kernel is loaded. Otherwise nothing changes.
``KBUILD_RUNTIME=off`` disables it.

Zero-JIT (:mod:`kbuild.runtime.loader`, issue 16): with a version 2 index (Triton's metadata per
entry) an exactly matching call is answered before Triton compiles: Triton's ``jit_cache_hook`` wraps
the function's compile slot, which returns a ``CompiledKernel`` built from the shipped cubin and
metadata; ``@triton.autotune`` kernels get the shipped config per GPU and key in the autotuner's cache.
The post-compile substitution above is the fallback. Direct launch (:mod:`kbuild.runtime.direct`): a shipped
kernel is launched through the CUDA driver API, so its first call builds no C module with the host compiler
(``KBUILD_RUNTIME_LAUNCH=triton``: Triton's own launcher).

Importing this package imports neither torch nor triton.
"""

from __future__ import annotations

from kbuild.runtime.hook import (
    RUNTIME_ENV,
    Event,
    disable,
    enable,
    enabled_packages,
    events,
    reset_events,
    runtime_disabled,
    substitutions,
)

__all__ = ["RUNTIME_ENV", "Event", "disable", "enable", "enabled_packages", "events", "reset_events",
           "runtime_disabled", "substitutions"]
