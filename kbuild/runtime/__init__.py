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
  (``KBUILD_RUNTIME_LAUNCH=triton``: Triton's own launcher). The shipped kernel lives in Triton's own
  ``kernel_cache``: after a specialisation's first call, calls are Triton's ``run`` with no kbuild frame but the
  generated launcher (issue 34).
* Post-compile substitution (:mod:`kbuild.runtime.hook`), the fallback: when Triton has compiled, or loaded from
  its cache, a kernel whose key matches an index entry for this GPU and Triton version, the verified tuned cubin
  replaces Triton's before the kernel is loaded. Otherwise nothing changes.

Coverage (:mod:`kbuild.runtime.coverage`): each specialisation answered or compiled and each autotuning key
answered or tuned, with the reasons (:func:`coverage_report`; ``KBUILD_RUNTIME_REPORT=FILE`` writes it at exit).

``KBUILD_RUNTIME=off`` disables all of them; ``KBUILD_RUNTIME=strict`` makes a call that would compile or autotune
raise :class:`CoverageError`. Importing this package imports neither torch nor triton.
"""

from __future__ import annotations

from kbuild.runtime.coverage import CoverageError
from kbuild.runtime.install import disable, enable, enabled_packages
from kbuild.runtime.state import (
    RUNTIME_ENV,
    Event,
    events,
    reset_events,
    runtime_disabled,
    runtime_mode,
    substitutions,
)
from kbuild.runtime.state import current_report as coverage_report

__all__ = ["RUNTIME_ENV", "CoverageError", "Event", "coverage_report", "disable", "enable", "enabled_packages",
           "events", "reset_events", "runtime_disabled", "runtime_mode", "substitutions"]
