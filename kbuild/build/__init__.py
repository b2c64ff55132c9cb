"""kbuild.build: the build core — declarations → keys → store → compile → (tune) → what a build ships.

It orchestrates the other layers (settings, compile, key, store, tune, emit) and is the only one that knows them
all; the build-system adapters (:mod:`kbuild.hooks`), the CLI's verbs (:mod:`kbuild.commands`) and the distributed
prewarm (:mod:`kbuild.prewarm`) call it. Module by module, in the order a build meets them:

* :mod:`.kernel_build` — :class:`~.kernel_build.KernelBuild`, one kernel × target through the pipeline, and the
  :data:`~.kernel_build.Tuner` type;
* :mod:`.resolve` — which kernels and targets, each declaration checked against its function and resolved
  (configuration space, heuristics), its keys; from the memo when it holds;
* :mod:`.memo` — the memo of resolved keys, so an all-hit build imports no Triton; :mod:`.provenance` proves the
  globals Triton folds into a kernel are plain functions of the fingerprinted files;
* :mod:`.baselines` — each build's baseline from the store or compiled now; one configuration compiled alone;
* :mod:`.hazards` — ``wgmma_hazards = "error"``: a cubin with a wgmma register race is refused;
* :mod:`.tunable` — whether a build can be tuned here, and its status line;
* :mod:`.tuning` — :func:`~.tuning.tune_build`, the one entry for tuning one build (GPU or cost model), the
  artefact of its result, and the tune phase;
* :mod:`.pipeline` — :func:`~.pipeline.run_pipeline`, the phases in order (and ``--locked``);
* :mod:`.plan` — :func:`~.plan.plan`, the build entry point the backend, the setuptools plugin and ``kbuild emit``
  share, and :func:`~.plan.replay` of a manifest;
* :mod:`.manifest` — the wheel manifest ``.dist-info/kbuild.json`` (and kbuild-nvcc's records of CUDA C++
  kernels in it), reading a wheel;
* :mod:`.package_data` — ``ship = "package-data"``: the cubins, the run-time index and the enabling module written
  into a JIT package;
* :mod:`.recorded` — ``[tool.kbuild] recordings``: each recorded specialisation an entry for every target, beside the
  hand-written ones (imported as on the recording machine where its import differs here), and the report of what
  the recordings gave; :mod:`.choices` — where an autotuned recorded kernel's choice per target comes from;
* :mod:`.prewarm` — prewarm on one machine: the pipeline with tuning on a miss, into the writable tiers.

Nothing here imports :mod:`kbuild.hooks`, which stands above it.
"""

from __future__ import annotations

__all__: list[str] = []
