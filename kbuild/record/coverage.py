"""Whether a wheel answers every call a recording holds, asked as the run time asks it.

:func:`coverage` takes a recording (:mod:`kbuild.record.format`) and the run-time indexes a wheel ships
(:mod:`kbuild.runtime.index`; :func:`wheel_indexes` reads them out of a ``.whl``) and, for each recorded
specialisation, computes the call the run time would see (:func:`kbuild.record.format.call_specialization`) and asks
the run time's own lookup (:func:`kbuild.runtime.lookup.find`: the baseline key over the entries shipped for the
function) and then what the zero-JIT loader checks before it loads a cubin without compiling
(:func:`kbuild.runtime.lookup.metadata_mismatch`: the entry's Triton metadata against the call's options and target;
an entry another key names the cubin of is refused). For an ``@triton.autotune`` kernel each recorded tuning key is
answered when an entry for that target carries it (``autotune.key``: the autotuner launches that configuration
without benchmarking); otherwise Triton's autotuner benchmarks on the first call.

Each answer names the entry or says why not; the counts are what ``kbuild inspect --recording`` and the build's
tests report. Nothing here compiles, imports the recorded kernels, or needs a GPU (the distribution of a kernel
from an installed package is looked up, as the run time looks it up).
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from kbuild.record.format import Recording, call_specialization
from kbuild.runtime.index import Index, ShippedEntry


@dataclass(frozen=True)
class Answer:
    """One recorded specialisation (one target), answered by the wheel or not."""

    function: str
    target: str
    specialization: str
    """Its id in the recording."""
    calls: int
    answered: bool
    detail: str
    """The entry that answers (``kernel`` and key), or why none does."""


@dataclass(frozen=True)
class TuningAnswer:
    """One recorded tuning key of an autotuned kernel on one target."""

    function: str
    target: str
    key: list[Any]
    answered: bool
    detail: str


@dataclass
class Coverage:
    """Every recorded specialisation and tuning key, answered or not (:func:`coverage`)."""

    answers: list[Answer] = field(default_factory=list)
    tunings: list[TuningAnswer] = field(default_factory=list)

    @property
    def missed(self) -> list[Answer]:
        return [a for a in self.answers if not a.answered]

    def counts(self) -> dict[str, int]:
        """``specializations`` recorded, ``answered``, ``calls`` recorded and ``calls_answered``; ``tuning_keys`` and
        ``tuning_keys_answered``."""
        return {"specializations": len(self.answers), "answered": sum(a.answered for a in self.answers),
                "calls": sum(a.calls for a in self.answers),
                "calls_answered": sum(a.calls for a in self.answers if a.answered),
                "tuning_keys": len(self.tunings), "tuning_keys_answered": sum(t.answered for t in self.tunings)}

    def as_json(self) -> dict[str, Any]:
        return {**self.counts(), "answers": [vars(a) for a in self.answers],
                "tunings": [vars(t) for t in self.tunings]}


def _shipped(indexes: Iterable[Index]) -> dict[str, list[ShippedEntry]]:
    out: dict[str, list[ShippedEntry]] = {}
    for index in indexes:
        for function, entries in index.by_function().items():
            out.setdefault(function, []).extend(entries)
    return out


def coverage(recording: Recording, indexes: Sequence[Index], *, targets: Iterable[str] | None = None) -> Coverage:
    """Which of ``recording``'s specialisations (those for ``targets``, default all) and tuning keys the entries of
    ``indexes`` answer (see the module docstring)."""
    from kbuild.runtime.lookup import find, metadata_mismatch

    wanted = set(targets) if targets is not None else None
    shipped = _shipped(indexes)
    out = Coverage()
    for kernel in recording.in_order():
        candidates = shipped.get(kernel.function, [])
        for spec in kernel.in_order():
            if wanted is not None and spec.target not in wanted:
                continue

            def answer(ok: bool, detail: str, spec: Any = spec, function: str = kernel.function) -> None:
                out.answers.append(Answer(function, spec.target, spec.id, spec.calls, ok, detail))

            call = call_specialization(recording, kernel, spec)
            if call.unsupported:
                answer(False, f"not declarable: {call.unsupported}")
                continue
            found = find(candidates, call)
            if not isinstance(found, ShippedEntry):
                answer(False, "no entry has the call's key" if candidates else "the wheel ships no entry for it")
                continue
            entry = found.entry
            conflict = found.index.conflicts.get(found.key)
            md = entry.get("triton_metadata")
            if conflict is not None:
                answer(False, f"entry {found.key[:16]} is refused: {conflict}")
            elif not isinstance(md, dict):
                answer(False, f"entry {found.key[:16]} has no Triton metadata: Triton compiles, then its cubin is "
                              "swapped")
            else:
                problem = metadata_mismatch(md, call.options, call.cc, call.triton_version)
                answer(problem is None, problem or f"{entry.get('kernel')} ({found.key[:16]})")
        if kernel.autotune is not None:
            _tunings(kernel, candidates, wanted, out)
    return out


def _tunings(kernel: Any, candidates: Sequence[ShippedEntry], wanted: set[str] | None, out: Coverage) -> None:
    seen: set[tuple[str, str]] = set()
    for t in kernel.tunings:
        ident = (t["target"], repr(t["key"]))
        if ident in seen or (wanted is not None and t["target"] not in wanted):
            continue
        seen.add(ident)
        carriers = [c for c in candidates if (c.entry.get("target") or {}).get("name") == t["target"]
                    and (c.entry.get("autotune") or {}).get("key") == t["key"]]
        detail = (f"{carriers[0].entry.get('kernel')} carries it" if carriers else
                  "no entry carries it: Triton's autotuner benchmarks on the first call")
        out.tunings.append(TuningAnswer(kernel.function, t["target"], list(t["key"]), bool(carriers), detail))


def wheel_indexes(wheel: str | Path) -> list[Index]:
    """The run-time indexes a wheel ships (``<package>/_kbuild/index.json``), each parsed as the run time parses it
    (:func:`kbuild.runtime.index.parse_index`); a :class:`~kbuild.errors.UsageError` names a wheel or an index that
    cannot be read."""
    from kbuild.errors import UsageError
    from kbuild.jsonio import DEFAULT_MAX_BYTES
    from kbuild.runtime.index import DATA_DIR, INDEX_FILE, parse_index

    path = Path(wheel)
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise UsageError(f"{path}: not a readable wheel ({exc})") from None
    out = []
    with zf:
        for info in sorted(zf.infolist(), key=lambda i: i.filename):
            parts = PurePosixPath(info.filename).parts
            if len(parts) < 3 or parts[-1] != INDEX_FILE or parts[-2] != DATA_DIR or parts[0].endswith(".dist-info"):
                continue
            where = f"{path}!{info.filename}"
            if info.file_size > DEFAULT_MAX_BYTES:
                raise UsageError(f"{where}: {info.file_size:,} bytes, over the limit for an index")
            out.append(parse_index(zf.read(info), data_dir=Path(*parts[:-1]), where=where))
    return out


__all__ = ["Answer", "Coverage", "TuningAnswer", "coverage", "wheel_indexes"]
