"""kbuild.tune.measure: is a candidate correct, and is it faster?

* :mod:`.backend`: the :class:`~.backend.Backend` protocol (``load`` / ``check`` / ``time``) and
  its result types;
* :mod:`.client` and :mod:`.worker`: the GPU implementation, in an isolated worker process that
  is restarted after a fault or hang (the parent never touches CUDA);
* :mod:`.model`: the CPU cost model, same interface, labelled as an estimate;
* :mod:`.cache`: the evaluation cache keyed by the candidate's ``.text`` digest.

Launching and timing on the GPU, and the statistics of those timings, sit one floor below in
:mod:`kbuild.device` (``kbuild bench`` uses the same code); the kernels' bench specs come from
:mod:`kbuild.bench.spec`. Nothing below imports this package.

Importing this package imports neither torch nor triton.
"""

from __future__ import annotations

from .backend import (
    GPU_BACKEND,
    K_ACCEPT,
    K_SEARCH,
    MODEL_BACKEND,
    Backend,
    CheckResult,
    Evaluation,
    KernelRef,
    LoadInfo,
    TimeResult,
    evaluate,
)

__all__ = ["GPU_BACKEND", "K_ACCEPT", "K_SEARCH", "MODEL_BACKEND", "Backend", "CheckResult", "Evaluation",
           "KernelRef", "LoadInfo", "TimeResult", "evaluate"]
