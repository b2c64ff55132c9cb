"""kbuild.nvcc: CUDA C++ translation units compiled through nvcc with per-architecture caching.

This package owns the nvcc launcher (``kbuild-nvcc``, ``kbuild nvcc``), usable as
``CMAKE_CUDA_COMPILER_LAUNCHER`` or as torch's ``PYTORCH_NVCC``: ``argv[1]`` is the real nvcc, the rest
are its arguments. Module by module:

* ``plan`` — runs nvcc's own ``--dryrun --keep`` plan and parses it into steps (environment
  assignments, then commands: host preprocessing, ``cudafe++``, ``cicc``, ``ptxas``, ``fatbinary``, the
  host compile), or says why it cannot (:class:`~kbuild.nvcc.plan.Unsupported`);
* ``steps`` — what kbuild knows of the two cached tools: which arguments of a ``cicc`` or ``ptxas``
  command are its input and outputs, and the key of one step (the preprocessed translation unit for one
  architecture or the PTX, the code-generation flags, the exact nvcc, cicc and ptxas identities);
* ``shell`` — what the ``/bin/sh`` nvcc runs each step through would do to a line of the plan; a line it
  would expand (a backquote, ``$(...)``, a glob, a redirection) is not run by the launcher;
* ``launcher`` — executes the plan, answering ``cicc`` and ``ptxas`` from the artefact store
  (:mod:`kbuild.cache`) where it can; anything it cannot parse runs plain nvcc with one warning naming
  why, so a wrong object is never produced;
* ``direct`` — the direct mode: a whole compile answered from the store, keyed by nvcc's plan, the response
  files and the environment nvcc and its steps read;
* ``schedule`` — which commands of the plan may overlap under ``--threads N``, and running them N at a time;
* ``module_id`` — nvcc's module id made reproducible (the ``cudafe++`` process id in it replaced);
* ``toolkit`` — finds nvcc installed from the package index (``nvidia-cuda-nvcc``: ``nvidia/cu13/bin``);
* ``cli`` — the ``kbuild nvcc`` verb.

Every other step (preprocessing, ``cudafe++``, ``fatbinary``, the host compile) runs as nvcc planned it,
so the object is the one nvcc would write.
"""

from __future__ import annotations

__all__: list[str] = []
