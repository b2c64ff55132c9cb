"""The direct mode: a whole nvcc compile answered from the store without running its steps, as ccache's direct mode.

After a full run (:mod:`kbuild.nvcc.launcher`), the launcher stores a *manifest* under a key computed from what
nvcc would do, before any step runs (:func:`invocation_key`): nvcc's own plan (``--dryrun``, a few milliseconds),
which already holds everything nvcc itself reads: the arguments, every ``--options-file``/``-optf`` (by what it
says, nested ones and include directories switched inside them included), ``NVCC_PREPEND_FLAGS`` and
``NVCC_APPEND_FLAGS``, ``nvcc.profile`` and the environment variables it appends (``INCLUDES``, ``PTXAS_FLAGS``,
``CUDAFE_FLAGS``, ``NVVM_FLAGS``, ...). Beside the plan the key holds what its steps read that the plan does not
show: the contents of every response file a step names (``-Xcompiler @h.rsp``; nested ``@file`` lines too), the
sources' absolute paths, and the environment variables that steer the host preprocessor (:data:`STEERING_ENV`),
that nvcc reads (:data:`NVCC_ENV`) or that its ``nvcc.profile`` names (:func:`profile_variables`), read from the
caller's environment. A plan the shell would expand (:mod:`kbuild.nvcc.shell`) is never run by the launcher, so
never keyed.

The manifest lists every file the translation unit read (the preprocessor's dependency lists of every
architecture: source, headers, ``nvcc.profile``) with its sha256, and every executable the plan ran (host
compiler, cudafe++, cicc, ptxas, fatbinary) with its sha256. The object and the dependency file are stored under a
result key that covers the manifest's key and all of those digests.

A later run with the same invocation hashes the listed files and executables again; when every digest matches,
it writes the stored object and dependency file and runs no step. A manifest key has :data:`SLOTS` slots, so
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
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kbuild.canonical import canonical_json
from kbuild.fsutil import read_bounded

from .plan import Plan

#: Format of the invocation key and the manifest; bumped when they change (2: keyed by nvcc's plan).
DIRECT_SCHEMA = 2
#: Manifests kept per invocation key.
SLOTS = 8
#: The environment variables that change what nvcc or the host preprocessor does.
STEERING_ENV = ("PATH", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN", "CPATH", "C_INCLUDE_PATH",
                "CPLUS_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH")
#: The environment variables nvcc 13 reads (the names in its executable), beside those of :data:`STEERING_ENV`.
NVCC_ENV = ("CICC_PATH", "CUDAFE_FLAGS", "CUDA_ROOT", "INCLUDES", "LIBRARIES", "LIBRARY_PATH", "LLVMC_FLAGS",
            "LLVMDIS_FLAGS", "NVASM_FLAGS", "NVDISASM_FLAGS", "NVLINK_FLAGS", "NVVMIR_LIBRARY_DIR", "NVVM_FLAGS",
            "NV_NVVM_VERSION", "OCG_FLAGS", "PTXAS_FLAGS", "SYSTEM_INCLUDES", "TMPDIR", "_NVVM_BRANCH_",
            "_TARGET_DIR_", "_TARGET_SIZE_", "LD_LIBRARY_PATH")
#: The most bytes of one response file or ``nvcc.profile`` read for the key.
MAX_FILE_BYTES = 16 << 20
#: The most bytes of one source or header hashed for a manifest (a larger one is not answered directly).
MAX_SOURCE_BYTES = 256 << 20
#: How deep response files may name further response files.
MAX_NESTING = 8
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


class NotKeyable(Exception):
    """Something a step reads cannot be keyed (an unreadable response file); ``str()`` says what. The compile
    runs its steps (each keyed by what it reads) and is not answered directly."""


_PROFILE_NAME = re.compile(r"^\s*([_A-Za-z][_A-Za-z0-9]*)\s*(?:\+=|=\+|\?=|=)", re.MULTILINE)
_PROFILE_REF = re.compile(r"\$\(([_A-Za-z][_A-Za-z0-9]*)\)")


def profile_variables(nvcc: str) -> list[str]:
    """The variables ``nvcc.profile`` beside ``nvcc`` assigns or reads (``INCLUDES += ...``, ``$(TOP)``): nvcc takes
    their starting values from the environment. [] without a readable profile."""
    try:
        text = read_bounded(Path(nvcc).resolve().parent / "nvcc.profile", max_bytes=MAX_FILE_BYTES).decode(
            errors="replace")
    except OSError:
        return []
    return sorted(set(_PROFILE_NAME.findall(text)) | set(_PROFILE_REF.findall(text)))


def response_digests(names: Sequence[str], cwd: Path) -> list[list[str]]:
    """``[[name, sha256], ...]`` of the response files ``names`` (as the plan writes them, relative to ``cwd``) and of
    every ``@file`` they name, recursively (gcc reads nested ones relative to the working directory).
    :class:`NotKeyable` for one that is missing, not a regular file, too large, or not split into words."""
    out: dict[str, str] = {}
    todo = [(n, 0) for n in names]
    while todo:
        name, depth = todo.pop(0)
        if name in out:
            continue
        if depth > MAX_NESTING:
            raise NotKeyable(f"response file @{name}: nested more than {MAX_NESTING} deep")
        try:
            data = read_bounded(cwd / name, max_bytes=MAX_FILE_BYTES)
        except OSError as exc:
            raise NotKeyable(f"response file @{name}: {exc.strerror or exc}") from None
        out[name] = hashlib.sha256(data).hexdigest()
        try:
            words = shlex.split(data.decode(errors="replace"))
        except ValueError as exc:
            raise NotKeyable(f"response file @{name}: {exc}") from None
        todo.extend((w[1:], depth + 1) for w in words if w.startswith("@") and len(w) > 1)
    return [[k, v] for k, v in out.items()]


def invocation_key(nvcc_digest: str, plan: Plan, args: Sequence[str], cwd: Path, environ: Mapping[str, str],
                   *, nvcc: str) -> str:
    """The direct mode's key (see the module's docstring): nvcc's normalised plan, the response files' contents,
    the sources' absolute paths and the environment nvcc and its steps read. The working directory itself is not
    in it (a build directory is often a new temporary one, with the same relative paths in the arguments):
    relative files of the manifest are read from the current one, and a manifest whose object names its working
    directory (``-g``) records it and answers only there. :class:`NotKeyable` as :func:`response_digests`."""
    names = dict.fromkeys([*STEERING_ENV, *NVCC_ENV, *profile_variables(nvcc)])
    return _sha({"schema": DIRECT_SCHEMA, "kind": "nvcc-direct-invocation", "nvcc_sha256": nvcc_digest,
                 "plan": plan.normalised(), "response_files": response_digests(plan.response_files(), cwd),
                 "args": list(args), "sources": source_paths(args, cwd),
                 "env": {k: environ.get(k) for k in names}})


def slot_key(invocation: str, slot: int) -> str:
    return _sha({"invocation": invocation, "slot": slot})


def result_key(invocation: str, files: Sequence[Sequence[str]], tools: Mapping[str, str]) -> str:
    return _sha({"invocation": invocation, "files": [list(f) for f in files], "tools": dict(sorted(tools.items()))})


def file_digests(paths: Sequence[str], cwd: Path) -> list[list[str]] | None:
    """``[[path, sha256], ...]`` of the files as named (relative ones from ``cwd``); None when one cannot be read
    (or is not a regular file, or is over :data:`MAX_SOURCE_BYTES`) or one uses a clock macro."""
    out: list[list[str]] = []
    for p in paths:
        try:
            data = read_bounded(cwd / p, max_bytes=MAX_SOURCE_BYTES)
        except OSError:
            return None
        if any(m in data for m in CLOCK_MACROS):
            return None
        out.append([p, hashlib.sha256(data).hexdigest()])
    return out


def current_digests(files: Sequence[Sequence[str]], cwd: Path) -> bool:
    """Whether every ``[path, sha256]`` (a stored manifest's list: untrusted) still holds."""
    try:
        for path, digest in files:
            data = read_bounded(cwd / path, max_bytes=MAX_SOURCE_BYTES)
            if hashlib.sha256(data).hexdigest() != digest:
                return False
    except (OSError, TypeError, ValueError):
        return False
    return True


__all__ = ["CLOCK_MACROS", "DIRECT_SCHEMA", "NVCC_ENV", "SLOTS", "SOURCE_SUFFIXES", "STEERING_ENV", "NotKeyable",
           "current_digests", "eligible", "file_digests", "invocation_key", "profile_variables", "response_digests",
           "result_key", "slot_key", "source_paths"]
