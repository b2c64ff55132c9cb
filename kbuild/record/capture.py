"""Captured argument values (``kbuild record --capture N``): the integer and bool tensors of a few real calls per
specialisation, kept beside the recording.

A recording says each call's shapes, dtypes, strides and scalar values, which is enough to generate inputs for
most kernels (:mod:`kbuild.bench.recorded`), but not where the values themselves matter: cross-entropy labels
(with their ``ignore_index``), a mixture of experts' routing indices and sorted offsets, masks. ``--capture N``
keeps, for up to ``N`` calls of each specialisation, the values of every tensor argument that is not floating
point (integer and bool tensors), as the call passed them (before it ran; on a GPU copied to the host). Floating
point tensors are not captured: generated values stand for them.

Layout
======

For the recording ``FILE`` (``liger.recording.json``), the folder ``FILE`` without its suffix plus ``.captures``
(``liger.recording.captures/``, :func:`captures_dir`):

* one ``<sha256>.npy`` file per captured tensor, in numpy's ``.npy`` format (read back without pickle), named by
  the sha256 of its bytes: equal values captured twice are one file;
* ``index.json``, written last (a crash leaves at worst files no index names)::

    {"format": "kbuild-captures", "version": 1, "calls_per_specialization": N, "max_mib": M,
     "captures": {"<specialisation id>": [
        {"sample": {"args": {...}, "grid": [...], "sm_count": 132}, "tensors": {"Y_ptr": "3f2a....npy"}},
        {"sample": {...}, "skipped": "the call's integer and bool tensors hold 96.0 MiB, more than --capture-mib 64"}
     ]}}

  ``sample`` is the call as the recording writes its samples (:mod:`kbuild.record`); ``tensors`` names each
  captured argument's file (its values have the sample's shape; a strided argument's values are those its view
  reaches). A specialisation keeps the ``N`` entries whose samples come first in canonical order, whichever
  process saw them, so that the same workload keeps the same calls.

Bounded: at most ``N`` calls per specialisation, and a call's captured tensors at most ``M`` MiB together
(``--capture-mib``, default 64): a larger call is listed as ``skipped`` with its size. The recording itself does
not change with ``--capture`` (it stays byte-identical); the captures are data from the workload, and the project
decides whether to commit them.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbuild.errors import UsageError
from kbuild.record.format import sample_order

FORMAT = "kbuild-captures"
VERSION = 1
INDEX = "index.json"
#: ``--capture-mib``'s default.
DEFAULT_MAX_MIB = 64
#: The largest index read.
MAX_INDEX_BYTES = 64 * 2**20


def captures_dir(recording: str | os.PathLike[str]) -> Path:
    """The captures folder of the recording file ``recording`` (``x.recording.json`` → ``x.recording.captures``)."""
    path = Path(recording)
    return path.with_name(path.stem + ".captures") if path.suffix else path.with_name(path.name + ".captures")


def captured(value: Any) -> bool:
    """Whether an argument is captured: a tensor whose elements are not floating point (integers, bools)."""
    is_float = getattr(value, "is_floating_point", None)
    return (hasattr(value, "data_ptr") and hasattr(value, "shape") and callable(is_float)
            and not is_float() and not getattr(value, "is_complex", lambda: False)())


def npy_bytes(tensor: Any) -> bytes:
    """A tensor's values (as its view reaches them) in numpy's ``.npy`` format."""
    import numpy as np

    array = tensor.detach().cpu().contiguous().numpy()
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def file_name(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest() + ".npy"


class Capturer:
    """The capturing side in a recorded process: writes a call's captured tensors into the session's staging
    folder and gives the entry for the part file, for calls that may be among a specialisation's first ``limit``
    (a call whose sample orders after ``limit`` entries this process holds already is not captured)."""

    def __init__(self, staging: str | os.PathLike[str], limit: int, max_mib: int) -> None:
        self.staging = Path(staging)
        self.limit = limit
        self.max_bytes = max_mib * 2**20
        self.max_mib = max_mib
        self.kept: dict[str, list[bytes]] = {}

    def offer(self, spec_id: str, sample: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any] | None:
        """The entry for this call (its tensors written), or None when it captures nothing or cannot be kept."""
        tensors = {name: value for name, value in args.items() if captured(value)}
        if not tensors:
            return None
        order = sample_order(sample)
        held = self.kept.setdefault(spec_id, [])
        if order in held or (len(held) >= self.limit and order > held[-1]):
            return None
        held.append(order)
        held.sort()
        del held[self.limit:]
        size = sum(int(t.numel()) * int(t.element_size()) for t in tensors.values())
        if size > self.max_bytes:
            return {"specialization": spec_id, "sample": dict(sample),
                    "skipped": f"the call's integer and bool tensors hold {size / 2**20:.1f} MiB, more than "
                               f"--capture-mib {self.max_mib}"}
        names = {}
        for name, tensor in sorted(tensors.items()):
            data = npy_bytes(tensor)
            names[name] = file_name(data)
            path = self.staging / names[name]
            if not path.exists():
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_bytes(data)
                os.replace(tmp, path)
        return {"specialization": spec_id, "sample": dict(sample), "tensors": names}


@dataclass
class Captures:
    """A captures folder read back: per specialisation id, its entries (see the module docstring)."""

    folder: Path
    calls_per_specialization: int = 0
    max_mib: int = DEFAULT_MAX_MIB
    entries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def of(self, spec_id: str) -> list[dict[str, Any]]:
        return list(self.entries.get(spec_id, ()))

    def tensor(self, name: str, *, dtype: str, shape: Iterable[int], where: str) -> Any:
        """The captured tensor in file ``name`` (a CPU torch tensor), checked against the dtype (``torch.int64``)
        and shape the sample says; a :class:`UsageError` naming ``where`` otherwise."""
        import numpy as np
        import torch

        from kbuild.fsutil import read_bounded

        if Path(name).name != name or not name.endswith(".npy"):
            raise UsageError(f"{self.folder / INDEX}: {where}: {name!r} is not a capture file name")
        path = self.folder / name
        try:
            data = read_bounded(path, max_bytes=2**40)
        except OSError as exc:
            raise UsageError(f"{path}: cannot read the capture of {where}: {exc.strerror or exc}") from None
        if file_name(data) != name:
            raise UsageError(f"{path}: the file's sha256 is not its name (edited or truncated?)")
        try:
            array = np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
        except ValueError as exc:
            raise UsageError(f"{path}: not a .npy file: {exc}") from None
        tensor = torch.from_numpy(np.ascontiguousarray(array))
        if str(tensor.dtype) != dtype or list(tensor.shape) != list(shape):
            raise UsageError(f"{path}: holds a {tensor.dtype} tensor of shape {list(tensor.shape)}, but {where} is "
                             f"{dtype} of shape {list(shape)}")
        return tensor


def load(folder: str | os.PathLike[str]) -> Captures | None:
    """The captures in ``folder`` (None when it has no index); a :class:`UsageError` naming the index when it is
    not one."""
    from kbuild.jsonio import read_json_file

    root = Path(folder)
    index = root / INDEX
    if not index.exists():
        return None
    doc = read_json_file(index, where=str(index), max_bytes=MAX_INDEX_BYTES)
    where = str(index)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise UsageError(f"{where}: not a kbuild captures index (format {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise UsageError(f"{where}: version: {doc.get('version')!r} is not supported: this kbuild reads version "
                         f"{VERSION}")
    caps = doc.get("captures")
    if not isinstance(caps, dict):
        raise UsageError(f"{where}: captures: expected a JSON object")
    for key in ("calls_per_specialization", "max_mib"):
        value = doc.get(key)
        if value is not None and (type(value) is not int or value < 0):
            raise UsageError(f"{where}: {key}: expected a non-negative integer, got {value!r}")
    out = Captures(root, int(doc.get("calls_per_specialization") or 0), int(doc.get("max_mib") or DEFAULT_MAX_MIB))
    for spec_id, entries in caps.items():
        if not isinstance(entries, list):
            raise UsageError(f"{where}: captures.{spec_id}: expected a JSON array")
        for i, e in enumerate(entries):
            at = f"captures.{spec_id}[{i}]"
            if not isinstance(e, dict) or not isinstance(e.get("sample"), dict) or (
                    not isinstance(e.get("tensors"), dict) and not isinstance(e.get("skipped"), str)):
                raise UsageError(f"{where}: {at}: expected {{\"sample\", \"tensors\"}} or {{\"sample\", \"skipped\"}}")
        out.entries[spec_id] = [dict(e) for e in entries]
    return out


def store(dest: str | os.PathLike[str], entries: Iterable[Mapping[str, Any]], staging: str | os.PathLike[str], *,
          limit: int, max_mib: int) -> dict[str, int]:
    """Add the entries the recorded processes wrote (``{"specialization", "sample", "tensors" | "skipped"}``, their
    files in ``staging``) to the captures folder ``dest`` (made when missing; an existing index is added to): per
    specialisation the ``limit`` entries of smallest sample kept, their files copied, the index written last.
    Returns counts: calls captured and skipped, files written."""
    from kbuild.canonical import canonical_json
    from kbuild.fsutil import write_atomic

    root = Path(dest)
    existing = load(root)
    merged: dict[str, dict[bytes, dict[str, Any]]] = {}
    for spec_id, held in (existing.entries.items() if existing else ()):
        for e in held:
            merged.setdefault(spec_id, {}).setdefault(sample_order(e["sample"]), e)
    sources: dict[str, Path] = {}
    for given in entries:
        entry = {k: v for k, v in given.items() if k != "specialization"}
        merged.setdefault(str(given["specialization"]), {}).setdefault(sample_order(entry["sample"]), entry)
        for name in entry.get("tensors", {}).values():
            sources[name] = Path(staging) / name
    kept = {spec_id: [by[k] for k in sorted(by)[:limit]] for spec_id, by in sorted(merged.items())}
    root.mkdir(parents=True, exist_ok=True)
    written = 0
    for held in kept.values():
        for e in held:
            for name in e.get("tensors", {}).values():
                target = root / name
                if target.exists():
                    continue
                source = sources.get(name)
                if source is None or not source.exists():
                    raise UsageError(f"{root / INDEX}: the capture file {name} is missing")
                tmp = target.with_suffix(".tmp")
                shutil.copyfile(source, tmp)
                os.replace(tmp, target)
                written += 1
    doc = {"format": FORMAT, "version": VERSION, "calls_per_specialization": limit, "max_mib": max_mib,
           "captures": kept}
    write_atomic(root / INDEX, canonical_json(doc) + b"\n")
    calls = sum(1 for held in kept.values() for e in held if "tensors" in e)
    skipped = sum(1 for held in kept.values() for e in held if "skipped" in e)
    return {"calls": calls, "skipped": skipped, "files_written": written}


__all__ = ["DEFAULT_MAX_MIB", "FORMAT", "INDEX", "VERSION", "Capturer", "Captures", "captured", "captures_dir",
           "file_name", "load", "npy_bytes", "store"]
