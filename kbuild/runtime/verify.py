"""What a shipped cubin must show before it is loaded: the one check of package data against its index entry.

The run time (:meth:`kbuild.runtime.state.RuntimeState.verified_cubin`, for every loading path) and ``kbuild inspect``
use it alike.

**Reading.** A cubin of ``<package>/_kbuild/`` is read only by :func:`read_cubin`, through
:func:`kbuild.fsutil.read_bounded` with the size its entry records (``cubin_bytes``): a FIFO, a device (a link
to ``/dev/zero``), a directory or a file of another size is refused before it is read whole, and nothing waits.
The bytes must have the entry's sha256.

**The cubin's own ELF** (:mod:`kbuild.sass.elf`) must agree with the entry, and with the call about to be
launched where there is one (:class:`Expected`), in everything a cubin states (:func:`cubin_mismatch`):

* architecture: the header's ``sm_XX[a]`` is the entry's target, and the GPU's compute capability;
* kernel symbol: the cubin holds one kernel, the entry's symbol, which Triton names after the function;
* block size: ``EIATTR_REQNTID`` is 32 threads per warp of the entry (and the call);
* parameters: ``EIATTR_KPARAM_INFO`` holds the arguments that are not compile-time constants (a pointer 8
  bytes, each scalar its width: :data:`PARAM_BYTES`, measured on Triton 3.6 for every scalar type), then
  Triton 3.6's two scratch pointers; in order against the call's signature, by size against the entry's
  (which the index keeps by name);
* shared memory: a cubin that addresses shared memory (a ``.nv.shared.<kernel>`` section) cannot run with
  the 0 bytes an entry may claim. Triton allocates its shared memory dynamically, so the amount is in no
  section or attribute (Triton 3.6: softmax needs 16 B, matmul 96 KiB, and neither cubin says so); "none"
  is what a cubin can contradict.

**What a cubin cannot show**: constexpr values (folded into the code; Triton 3.6 names a kernel after its
function, without the specialisation suffix older versions mangled into it: the BLOCK=1024 and BLOCK=2048
softmax cubins have the same symbol, parameters, block size and shared-memory use and differ only in their
code), ``num_stages``, an argument's divisibility. There the entry's pairing of key and cubin is all there
is, and nothing inside an index authenticates it against an editor who rewrites it consistently (its
digests are easy to recompute). What is checked is that the index does not contradict itself: a cubin is
the compile of one specialisation, so entries with different keys that name the same cubin (a copy of an
entry re-keyed to another constexpr value; an entry pointed at another's cubin with its digest updated) are
all refused (:func:`pairing_conflicts`), unless every entry of the group lists the others in
``shares_cubin_with``, as kbuild's build writes them when two specialisations compile to the same bytes
(:func:`kbuild.build.package_data.write_package_data`): a single edited or copied entry cannot. That a whole wheel is what its sources compile to is
what ``kbuild verify-wheel`` proves, by rebuilding it.

This module imports neither torch nor triton.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Bytes of each scalar parameter in a Triton 3.6 kernel's parameter bank (pointers: 8), read from the
#: ``EIATTR_KPARAM_INFO`` of a kernel compiled with one argument of each type.
PARAM_BYTES = {"i1": 1, "u1": 1, "i8": 1, "u8": 1, "i16": 2, "u16": 2, "fp16": 2, "bf16": 2, "i32": 4, "u32": 4,
               "fp32": 4, "f32": 4, "i64": 8, "u64": 8, "fp64": 8}
#: The parameters Triton 3.6 appends to every kernel: the global and the profile scratch pointers.
SCRATCH_PARAMS = (8, 8)
#: No shipped cubin is larger (a sanity bound on ``cubin_bytes`` before anything is read).
MAX_CUBIN_BYTES = 512 << 20


class Refused(Exception):
    """A shipped cubin that must not be loaded; the message says why (for the one logged line)."""


#: How the run time's reason for not loading a :class:`Refused` cubin begins (such a reason is logged as a
#: warning: the package data is damaged or was edited).
REFUSED = "shipped cubin refused"


@dataclass(frozen=True)
class Expected:
    """What the call about to be launched needs of the cubin; None where it is not known."""

    cc: int | None = None
    """The GPU's compute capability (90 for sm_90 and sm_90a)."""
    params: Sequence[int] | None = None
    """Sizes of the parameters the launcher passes, in order, scratch pointers included."""
    num_warps: int | None = None
    name: str | None = None
    """The kernel's name (Triton's: the function's ``__name__``)."""


def read_cubin(data_dir: Path, entry: Mapping[str, Any]) -> bytes:
    """The bytes of the entry's cubin: a regular file of exactly the recorded size with the recorded sha256."""
    size = entry.get("cubin_bytes")
    if type(size) is not int or not 0 < size <= MAX_CUBIN_BYTES:
        raise Refused(f"the entry records no usable cubin size (cubin_bytes {size!r:.40})")
    path = Path(data_dir) / str(entry["cubin"])
    from kbuild.fsutil import read_bounded

    try:
        data = read_bounded(path, max_bytes=size)
    except OSError as exc:
        raise Refused(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) != size:
        raise Refused(f"{path}: {len(data):,} bytes, the entry records {size:,}")
    if hashlib.sha256(data).hexdigest() != entry["cubin_sha256"]:
        raise Refused(f"cubin digest mismatch: {path} is not the entry's sha256 {str(entry['cubin_sha256'])[:16]}…")
    return data


def entry_params(signature: Mapping[str, Any]) -> list[int | None]:
    """Parameter sizes a declared signature (kbuild notation) gives, in the order given: none for ``:1`` and
    ``"none"`` (compile-time constants); None for a type whose width is not known."""
    from kbuild.declarations.signature import parse_type

    out: list[int | None] = []
    for text in signature.values():
        try:
            t = parse_type(text)
        except ValueError:
            out.append(None)
            continue
        if t.is_constant_one or t.is_none:
            continue
        out.append(8 if t.pointer else PARAM_BYTES.get(t.element))
    return out


def call_params(signature: Mapping[str, Any]) -> list[int] | None:
    """Parameter sizes of a call from Triton's signature (``"*fp16"``, ``"i32"``, ``"constexpr"``), scratch
    pointers included; None when an argument's width is not known (a tuple, a tensor descriptor)."""
    out: list[int] = []
    for ty in signature.values():
        if ty == "constexpr":
            continue
        if not isinstance(ty, str):
            return None
        size = 8 if ty.startswith("*") else PARAM_BYTES.get(ty)
        if size is None:
            return None
        out.append(size)
    return [*out, *SCRATCH_PARAMS]


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def cubin_mismatch(data: bytes, entry: Mapping[str, Any], *, where: str, call: Expected | None = None) -> str | None:
    """Why the cubin ``data`` is not what ``entry`` (and ``call``) describe; None when everything it states agrees."""
    from kbuild.errors import UsageError
    from kbuild.sass.elf import Cubin

    try:
        cubin = Cubin(data, where)
        kernels = cubin.kernels()
        name = kernels[0] if len(kernels) == 1 else None
        params = cubin.params(name) if name is not None else []
        threads = cubin.required_threads(name) if name is not None else None
    except UsageError as exc:
        return str(exc)
    checks = entry.get("checks") or {}
    md = entry.get("triton_metadata") or {}
    target = entry.get("target") or {}
    want_name = checks.get("name") or md.get("name")
    if name is None or name != want_name:
        return f"the cubin's kernels are {kernels}, the entry's symbol is {want_name!r}"
    function = str(entry.get("function", ""))
    if call is not None and call.name is not None and name != call.name:
        return f"the cubin's kernel is {name!r}, the called function is {call.name!r}"
    if ":" in function and name != function.rpartition(":")[2].rpartition(".")[2]:
        return f"the cubin's kernel {name!r} is not the entry's function {function!r}"
    if cubin.arch != target.get("arch") or cubin.sm != target.get("cc"):
        return f"the cubin is for {cubin.arch}, the entry's target is {target.get('arch')!r}"
    if call is not None and call.cc is not None and cubin.sm != call.cc:
        return f"the cubin is for {cubin.arch}, this GPU is sm_{call.cc}"
    # a served entry's config is the call's (its key); the cubin's own warps are in its checks and metadata
    served = entry.get("serves_call") or {}
    warps = {w for w in (_int(checks.get("num_warps")), _int(md.get("num_warps")),
                         None if "num_warps" in served else _int((entry.get("config") or {}).get("num_warps")),
                         call.num_warps if call is not None else None) if w is not None}
    if threads is not None and any(threads != (32 * w, 1, 1) for w in warps):
        return f"the cubin's block is {threads[0]}×{threads[1]}×{threads[2]} threads, the entry's num_warps is " \
               f"{sorted(warps)}"
    sizes = [p.size for p in params]
    if call is not None and call.params is not None and sizes != list(call.params):
        return f"the cubin's parameters are {sizes} bytes, the call passes {list(call.params)}"
    declared = entry_params(entry.get("signature") or {})
    known = [d for d in declared if d is not None]
    if len(known) == len(declared):
        want = Counter(known) + Counter(SCRATCH_PARAMS)
        if Counter(sizes) != want:
            return (f"the cubin's parameters are {sizes} bytes, the entry's signature gives "
                    f"{sorted(want.elements())} (in some order)")
    for what, shared in (("checks", checks.get("shared")), ("Triton metadata", md.get("shared"))):
        if shared == 0 and cubin.uses_shared_memory(name):
            return f"the cubin uses shared memory, the entry's {what} records 0 bytes"
    return None


def expected_of_compiled(compiled: bytes, md: Any) -> Expected:
    """What the cubin Triton compiled for a call states (its parameters, architecture, name), with ``md`` its Triton
    metadata, for the shipped cubin to agree with; the parts that cannot be read are left unchecked."""
    from kbuild.errors import UsageError
    from kbuild.sass.elf import Cubin

    try:
        own = Cubin(compiled, "<Triton's cubin>")
        name = getattr(md, "name", None)
        params = [p.size for p in own.params(name)] if name in own.kernels() else None
        return Expected(cc=own.sm, params=params, num_warps=getattr(md, "num_warps", None), name=name)
    except UsageError:
        return Expected(num_warps=getattr(md, "num_warps", None), name=getattr(md, "name", None))


def pairing_conflicts(entries: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Key → reason for every entry that names a cubin another entry, under another key, names too, unless the
    entries declare it to each other: two specialisations may compile to the same bytes (an argument's divisibility
    the code never uses, autotune configurations that differ only in what the code does not read), and the build
    then files the cubin under each key with ``shares_cubin_with`` listing the others. A group is trusted only when
    every entry lists exactly the other keys of the group; an entry pointed at another's cubin, or a copy re-keyed,
    does not, and the whole group is refused: at most one of them can be right."""
    by_cubin: dict[str, list[str]] = {}
    for key, entry in entries.items():
        by_cubin.setdefault(str(entry.get("cubin_sha256")), []).append(key)
    out: dict[str, str] = {}
    for sha, keys in by_cubin.items():
        if len(keys) < 2:
            continue
        group = set(keys)
        declared = all(isinstance(entries[k].get("shares_cubin_with"), list)
                       and set(map(str, entries[k]["shares_cubin_with"])) == group - {k} for k in keys)
        if declared:
            continue
        for key in keys:
            others = ", ".join(k[:16] for k in sorted(keys) if k != key)
            out[key] = (f"its cubin {sha[:16]}… is also the cubin of entry {others}, and the entries do not all list "
                        "each other in shares_cubin_with: the index contradicts itself")
    return out


__all__ = ["MAX_CUBIN_BYTES", "PARAM_BYTES", "REFUSED", "SCRATCH_PARAMS", "Expected", "Refused", "call_params",
           "cubin_mismatch", "entry_params", "expected_of_compiled", "pairing_conflicts", "read_cubin"]
