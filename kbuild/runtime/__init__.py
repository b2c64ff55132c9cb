"""kbuild.runtime: tuned cubins for packages that run their Triton kernels just in time.

Build side (:mod:`kbuild.build.package_data`, not part of this package): for ``ship = "package-data"`` projects,
:func:`~kbuild.build.package_data.write_package_data` writes ``<package>/_kbuild/`` — the shipped
cubins as ``<sha256>.cubin``, an ``index.json`` keyed by each kernel's baseline key
(:mod:`kbuild.runtime.index`), and an ``__init__.py`` whose import calls :func:`enable`.

Run side: ``kbuild.runtime.enable("mypkg")`` (or ``import mypkg._kbuild``; :mod:`kbuild.runtime.install`) loads
the package's index into the run time's one state (:mod:`kbuild.runtime.state`: what is enabled and installed,
the events, the verified cubins) and puts the loading paths into Triton. Each path is a thin adapter: it asks the
one pure lookup (:mod:`kbuild.runtime.lookup`: from a call to the shipped entry, or why not; the key recomputed
from Triton's specialisation by :mod:`kbuild.runtime.keys`), has the cubin checked against its entry
(:mod:`kbuild.runtime.verify`), acts, and records what it did.

* Zero-JIT (:mod:`kbuild.runtime.loader`, issue 16): with a version 2 index (Triton's metadata per entry) an
  exactly matching call is answered before Triton compiles: Triton's ``jit_cache_hook`` wraps the function's
  compile slot, which returns a ``CompiledKernel`` built from the shipped cubin and metadata;
  ``@triton.autotune`` kernels get the shipped config per GPU and key in the autotuner's cache.
* Direct launch (:mod:`kbuild.runtime.direct`): a shipped kernel is launched through the CUDA driver API
  (:mod:`kbuild.device.cuda`), so its first call builds no C module with the host compiler
  (``KBUILD_RUNTIME_LAUNCH=triton``: Triton's own launcher).
* Post-compile substitution (:mod:`kbuild.runtime.hook`), the fallback: when Triton has compiled, or loaded from
  its cache, a kernel whose key matches an index entry for this GPU and Triton version, the verified tuned cubin
  replaces Triton's before the kernel is loaded. Otherwise nothing changes.

``KBUILD_RUNTIME=off`` disables all of them. Importing this package imports neither torch nor triton.
"""

from __future__ import annotations

from kbuild.runtime.install import disable, enable, enabled_packages
from kbuild.runtime.state import RUNTIME_ENV, Event, events, reset_events, runtime_disabled, substitutions

__all__ = ["RUNTIME_ENV", "Event", "disable", "enable", "enabled_packages", "events", "reset_events",
           "runtime_disabled", "substitutions"]
