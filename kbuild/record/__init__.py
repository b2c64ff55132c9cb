"""Recordings: the Triton specialisations a real workload launches (``kbuild record``), in a committed file.

``kbuild record -- COMMAND`` runs a workload (a package's tests, a training step, a serving warm-up) with a
recorder in every Python process it starts (:mod:`kbuild.record.session`, :mod:`kbuild.record.child`), on a GPU
through Triton's own hooks (:mod:`kbuild.record.gpu`) or, for a workload on CPU tensors, with launches recorded
instead of run (:mod:`kbuild.record.cpu`), and writes what they launched into one file
(:mod:`kbuild.record.format`). Values derived from the device's SM count are marked
(:mod:`kbuild.record.machine`).

The recording format, version 1
===============================

One JSON document, written canonically (:func:`kbuild.record.format.dumps`): keys sorted, one space of indentation
per level, a value kept on one line when that line fits in 120 characters, UTF-8, a final newline; lists in a
fixed order (below). JSON rather than TOML: the standard library reads and writes it (Python has no TOML writer), it has
``null`` (Triton's ``None`` arguments, unset options), and kbuild's other documents and its one untrusted-JSON
reader (:mod:`kbuild.jsonio`) are JSON. The same facts give the same bytes: no timestamps, paths, host names or
process ids; ids are content hashes; samples are chosen by canonical order, not by which process saw them first.

.. code-block:: json

    {
     "compiler_options": {"5b0c...": {"arch": "sm90", "backend_name": "cuda", "...": "..."}},
     "format": "kbuild-recording",
     "kernels": [
      {
       "autotune": null,
       "distribution": {"name": "liger_kernel", "version": "0.8.5"},
       "function": "liger_kernel.ops.rms_norm:_rms_norm_backward_kernel",
       "globals": {},
       "heuristics": {},
       "module": "liger_kernel.ops.rms_norm",
       "name": "_rms_norm_backward_kernel",
       "qualname": "_rms_norm_backward_kernel",
       "source_hash": "4f1e...",
       "specializations": [
        {
         "autotune_config": null,
         "calls": 2,
         "compiler_options": "5b0c...",
         "constexprs": {"BLOCK_SIZE": 4096, "X_dtype": {"dtype": "fp16"}, "casting_mode": 0, "...": "..."},
         "heuristics": {},
         "id": "0d9a...",
         "options": {"num_ctas": 1, "num_stages": 3, "num_warps": 8},
         "samples": [
          {"args": {"dY_ptr": {"dtype": "torch.float16", "shape": [4096, 4096], "strides": [4096, 1]},
                    "n_rows": 4096, "rows_per_program": 4096, "...": "..."}, "grid": [1], "sm_count": 1}
         ],
         "samples_truncated": false,
         "signature": {"dY_ptr": "*fp16:16", "W_row_stride": "i32:1", "rows_per_program": "i32:16", "...": "..."},
         "sm_dependent": {"grid[0]": ["sm_count"], "rows_per_program": ["ceil(n_rows / sm_count)", "..."]},
         "target": "sm_90",
         "triton": "3.6.0",
         "unsupported": null
        }
       ],
       "tunings": []
      }
     ],
     "samples_per_specialization": 8,
     "version": 1
    }

Top level:

* ``format``: ``"kbuild-recording"``; ``version``: ``1`` (a reader refuses other values);
* ``samples_per_specialization``: how many distinct samples a specialisation keeps (``--samples``);
* ``compiler_options``: id → Triton's parsed backend options (``CUDAOptions`` as
  :func:`kbuild.compile.triton_aot.portable_options` gives them: library paths reduced to file names, the
  code-changing ``TRITON_*`` variables under ``triton_env`` when set) *without* the launch options a
  specialisation shows (:data:`kbuild.record.format.LAUNCH_OPTIONS` that are set). The id is
  :func:`kbuild.record.format.content_id` of the value. One entry per target, Triton version and environment;
* ``kernels``: sorted by ``function``, then by the canonical JSON of the identity fields.

A kernel is one ``@triton.jit`` function as called through one ``@triton.autotune`` object (or none). Its
identity: ``module``, ``qualname`` (``function`` is ``module:qualname``), ``name`` (``fn.__name__``: the key's
``function`` component), ``source_hash`` (:func:`kbuild.compile.triton_aot.source_hash`: Triton's
``JITFunction.cache_key``, plus the module attributes Triton folds into the code, as the build and run time key
it; a package that probes the hardware at import can have another hash on another machine, and then records
another kernel), ``distribution`` (``{"name", "version"}`` of the installed distribution the module comes from,
as the build's key has it; null for a module of the project), and ``autotune``:

* ``autotune``: null, or ``{"key": [argument names], "configs": [{"kwargs", "num_warps", "num_stages",
  "num_ctas", "maxnreg"}, ...] (the autotuner's configs, in its order), "prunes": true when it has
  early_config_prune or a perf_model}`` (the configs it benchmarks then depend on the call);
* ``globals`` (may be absent: none recorded): what the function and the ``@triton.jit`` functions it calls read at
  module level on the recording machine (:func:`kbuild.compile.folded.snapshot`), ``"module:NAME"`` → one of
  ``{"constexpr": value}`` (a ``tl.constexpr``; a dtype as ``{"dtype": "fp16"}``), ``{"value": value}`` (a plain
  scalar), ``{"jit": "module:qualname"}`` (the function the name resolves to) or ``{"text": "..."}`` (anything
  else). Not part of the identity. A build whose own import gives another ``source_hash`` sets these back
  (:mod:`kbuild.build.recorded`);
* ``heuristics``: name → ``"outside"`` or ``"inside"``: the constexprs ``@triton.heuristics`` layers set on the way
  to the function, above the autotuner (computed once per call, before its key; no config holds them) or below it
  (computed per config; or there is no autotuner);
* ``tunings``: each distinct run of the autotuner for a key: ``{"target", "key": [Triton's autotune key: the key
  arguments' values, then each tensor argument's dtype, e.g. "torch.float16"], "configs": [indexes
  benchmarked], "choice": index | null, "source": "measured" | "triton-cache" | null, "sm_count": n | null}``.
  In ``--mode cpu`` nothing is measured: ``choice``, ``source`` and ``sm_count`` are null. On a GPU the choice is
  whatever Triton's timing gave; two runs may choose differently, and both tunings are then kept.
* ``specializations``: sorted by the canonical JSON of their identity.

A specialisation is one compiled variant of the kernel. Identity (its ``id`` is the content id of these):

* ``target`` (``sm_90``: the GPU's, or ``--target`` in ``--mode cpu``), ``triton`` (the version);
* ``signature``: every runtime parameter in the declaration notation of ``[tool.kbuild.kernels]`` (``*fp16:16``
  a 16-byte-aligned pointer, ``i32`` / ``i32:16`` / ``i64`` integers, ``i32:1`` an integer Triton made the
  constant 1, ``fp32`` a float, ``u1`` a bool, ``none`` an argument passed None), from
  :func:`kbuild.runtime.keys.specialization_from_hook` / :func:`~kbuild.runtime.keys.specialization_for_call`;
* ``constexprs``: every ``tl.constexpr`` parameter's value (a dtype as ``{"dtype": "fp16"}``), the autotuner's
  config and the heuristics' values included;
* ``options``: the backend options a declaration sets, when set (``num_warps``, ``num_stages``, ``num_ctas``,
  ``maxnreg``, ``ptx_options``); ``compiler_options``: the id of the rest in the top-level table;
* ``heuristics``: the constexprs a ``@triton.heuristics`` layer set, with their values;
* ``autotune_config``: the index of the autotuner's config this specialisation is (null: not autotuned, or the
  config is not known);
* ``unsupported``: null, or why the call cannot be written as a declaration (a tuple argument, another constant):
  such a specialisation is recorded, never built.

And what was seen of it:

* ``calls``: launches by the workload (an autotuner's benchmarking launches are not counted; in ``--mode cpu`` a
  call of an autotuned kernel counts once on each config's specialisation it would benchmark; a warm-up counts
  none; a process killed without exiting, such as a ``multiprocessing.Pool`` worker on ``terminate()``, loses the
  calls of its last second);
* ``samples``: at most ``samples_per_specialization`` distinct calls, the smallest in canonical JSON order:
  ``{"args": {runtime parameter: a tensor's {"dtype", "shape", "strides"}, a scalar's value (a non-finite float
  as {"float": "nan"}), null, or {"type": "module.Class"}}, "grid": [x, y, z as launched] | null, "sm_count":
  the SM count of the device (--mode cpu: 1 or --sm-count)}``; ``samples_truncated``: more distinct calls were
  seen than kept;
* ``sm_dependent``: derived on every write from the samples (:func:`kbuild.record.machine.sm_dependent`): argument,
  constexpr or ``grid[i]`` → the derivations from the SM count that hold in every sample (``"sm_count"``,
  ``"k * sm_count"``, ``"ceil(X / sm_count)"``). A reader ignores what the file says and recomputes it.

Merging (``kbuild record --merge``, appending to an existing file, a run's processes): kernels and
specialisations are united by identity, ``calls`` summed, samples united and cut to the limit in canonical order
(``samples_truncated`` when anything was cut), tunings united.
:func:`kbuild.record.format.call_specialization` turns a recorded specialisation back into the
:class:`kbuild.runtime.keys.CallSpecialization` the run time computes for such a call (its ``key()`` is the run
time's key of the call and the build's of the matching declaration). :mod:`kbuild.record.covers` asks, with the
run time's own lookup, whether a wheel's package data answers every call a recording holds.

Captures (``kbuild record --capture N``) are not part of the recording: the integer and bool tensors of up to
``N`` calls per specialisation go into a folder beside it, under their content hashes, with an index of their own
(:mod:`kbuild.record.capture`); the recording's bytes are the same with or without them.
"""

from __future__ import annotations

from kbuild.record.format import (
    DEFAULT_SAMPLES,
    FORMAT,
    VERSION,
    Kernel,
    Recording,
    Specialization,
    call_specialization,
    dumps,
    load,
    merge,
)

__all__ = ["DEFAULT_SAMPLES", "FORMAT", "VERSION", "Kernel", "Recording", "Specialization", "call_specialization",
           "dumps", "load", "merge"]
