"""Handing a Triton kernel compiled in one process to another: cubin bytes plus the metadata JSON.

Level 1 of the tuner compiles configurations in a pool of CPU processes while the GPU worker
measures; the worker needs a launchable Triton 3.6 ``CompiledKernel`` for each. A
``CompiledKernel`` is built from its source (the ``ASTSource``, which gives the launcher its
signature and constants) and a *metadata group*: a ``<name>.json`` file with the metadata and a
``<name>.cubin`` file with the machine code (``triton/compiler/compiler.py``; the same files a
Triton cache hit reads). :func:`kernel_payload` takes the two out of a kernel compiled by
:func:`kbuild.compile.triton_aot.hermetic_compile` (line info off, private cache, so the cubin is
the one ``kbuild compile`` would build) and :func:`kernel_from_payload` rebuilds the kernel on
the other side. Nothing is recompiled and no shared cache directory is involved.

The run time's zero-JIT loader (:mod:`kbuild.runtime.loader`) uses the same rebuild for a shipped
cubin and the Triton metadata recorded in the package's index, so this module lives in
:mod:`kbuild.runtime` (the core), which the tuner (:mod:`kbuild.tune.level1.compile`, the measurement worker) imports.

Importing this module imports neither torch nor triton.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class KernelPayload:
    """What crosses the process boundary: picklable, a few hundred kilobytes at most."""

    name: str
    """The kernel's symbol (``metadata.name``)."""
    cubin: bytes
    metadata_json: str
    """Triton's metadata as Triton writes it into its cache (``json.dumps(metadata, default=vars)``)."""
    hash: str


def kernel_payload(compiled: Any) -> KernelPayload:
    """The cubin and metadata of a Triton ``CompiledKernel``."""
    metadata = dict(compiled.metadata._asdict())
    return KernelPayload(name=str(compiled.name), cubin=bytes(compiled.asm["cubin"]),
                         metadata_json=json.dumps(metadata, default=vars, sort_keys=True), hash=str(compiled.hash))


def kernel_from_payload(src: Any, payload: KernelPayload) -> Any:
    """A Triton ``CompiledKernel`` for ``src`` (the same ``ASTSource`` it was compiled from) that launches
    ``payload``'s cubin with its metadata (shared memory, warps, launch options)."""
    from triton.compiler.compiler import CompiledKernel

    with tempfile.TemporaryDirectory(prefix="kbuild-handover-") as tmp:
        meta = Path(tmp) / f"{payload.name}.json"
        binary = Path(tmp) / f"{payload.name}.cubin"
        meta.write_text(payload.metadata_json)
        binary.write_bytes(payload.cubin)
        # CompiledKernel reads both files in its constructor; the directory may go afterwards.
        return CompiledKernel(src, {meta.name: str(meta), binary.name: str(binary)}, payload.hash)
