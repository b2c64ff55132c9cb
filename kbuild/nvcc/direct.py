"""The direct mode: a whole nvcc compile answered from the store without running nvcc, as ccache's direct mode.

After a full run (:mod:`kbuild.nvcc.launcher`), the launcher stores a *manifest* under a key computed from what
it can see without running anything (:func:`invocation_key`): the arguments, the environment variables that steer nvcc and the host preprocessor, and the nvcc executable. The manifest lists every
file the translation unit read (the preprocessor's dependency lists of every architecture: source, headers,
``nvcc.profile``) with its sha256, and every executable the plan ran (host compiler, cudafe++, cicc, ptxas,
fatbinary) with its sha256. The object and the dependency file are stored under a result key that covers the
manifest's key and all of those digests.

A later run with the same invocation hashes the listed files and executables again; when every digest matches,
it writes the stored object and dependency file and runs nothing. A manifest key has :data:`SLOTS` slots, so
that a few versions of the headers (a branch switch and back) each keep their entry; entries are immutable.

Not answered directly (the full plan runs, with its per-step cache): a compile whose files use ``__DATE__``,
``__TIME__`` or ``__TIMESTAMP__`` (the object changes with the clock), one without ``-c`` and ``-o``, and one whose
declared CUDA kernels shipped untuned when a tuning result has reached the store since, or this machine can now
tune them (:meth:`kbuild.nvcc.tuned.CudaTuning.answers`).
The known limit of any direct mode stays: a header created *after* the first build, earlier on the include path
than the one the manifest lists, is not seen; delete the entry (``KBUILD_NVCC_CACHE=off`` for one build) in that
case.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kbuild.canonical import canonical_json

#: Format of the invocation key and the manifest; bumped when they change.
DIRECT_SCHEMA = 1
#: Manifests kept per invocation key.
SLOTS = 8
#: The environment variables that change what nvcc or the host preprocessor does.
STEERING_ENV = ("PATH", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN", "CPATH", "C_INCLUDE_PATH",
                "CPLUS_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH")
#: Strings that make an object depend on the clock.
CLOCK_MACROS = (b"__DATE__", b"__TIME__", b"__TIMESTAMP__")


def _sha(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj, ascii_only=True)).hexdigest()


def eligible(args: Sequence[str]) -> bool:
    """A single compile to a named object (``-c`` and ``-o``)."""
    return ("-c" in args or "--compile" in args) and any(a in ("-o", "--output-file") or a.startswith("-o=")
                                                         or a.startswith("--output-file=") for a in args)


#: Suffixes of the source files nvcc compiles.
SOURCE_SUFFIXES = (".cu", ".cup", ".cpp", ".cc", ".cxx", ".c", ".C")


def source_paths(args: Sequence[str], cwd: Path) -> list[str]:
    """The absolute paths of the source files among ``args``. nvcc derives the module id, which names the
    anonymous-namespace and static device symbols in the object, from a source's absolute path: the same
    arguments in another checkout give another object."""
    return [str((cwd / a).resolve()) for a in args
            if not a.startswith("-") and a.endswith(SOURCE_SUFFIXES) and (cwd / a).is_file()]


def invocation_key(nvcc_digest: str, args: Sequence[str], cwd: Path, environ: Mapping[str, str]) -> str:
    """What the launcher knows before running anything: nvcc, the arguments, the sources' absolute paths and the
    steering environment. The working directory itself is not in it (a build directory is often a new temporary
    one, with the same relative paths in the arguments): relative files of the manifest are read from the current
    one, and a manifest whose object names its working directory (``-g``) records it and answers only there."""
    return _sha({"schema": DIRECT_SCHEMA, "kind": "nvcc-direct-invocation", "nvcc_sha256": nvcc_digest,
                 "args": list(args), "sources": source_paths(args, cwd),
                 "env": {k: environ.get(k) for k in STEERING_ENV}})


def slot_key(invocation: str, slot: int) -> str:
    return _sha({"invocation": invocation, "slot": slot})


def result_key(invocation: str, files: Sequence[Sequence[str]], tools: Mapping[str, str]) -> str:
    return _sha({"invocation": invocation, "files": [list(f) for f in files], "tools": dict(sorted(tools.items()))})


def file_digests(paths: Sequence[str], cwd: Path) -> list[list[str]] | None:
    """``[[path, sha256], ...]`` of the files as named (relative ones from ``cwd``); None when one cannot be read
    or one uses a clock macro."""
    out: list[list[str]] = []
    for p in paths:
        try:
            data = (cwd / p).read_bytes()
        except OSError:
            return None
        if any(m in data for m in CLOCK_MACROS):
            return None
        out.append([p, hashlib.sha256(data).hexdigest()])
    return out


def current_digests(files: Sequence[Sequence[str]], cwd: Path) -> bool:
    """Whether every ``[path, sha256]`` still holds."""
    for path, digest in files:
        try:
            data = (cwd / path).read_bytes()
        except OSError:
            return False
        if hashlib.sha256(data).hexdigest() != digest:
            return False
    return True


__all__ = ["CLOCK_MACROS", "DIRECT_SCHEMA", "SLOTS", "SOURCE_SUFFIXES", "STEERING_ENV", "current_digests", "eligible",
           "file_digests", "invocation_key", "result_key", "slot_key", "source_paths"]
