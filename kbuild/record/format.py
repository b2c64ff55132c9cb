"""The recording file: its data model, reader, merge and canonical writer (format version 1).

The format is documented in :mod:`kbuild.record` (the package docstring). This module is the only code that
reads or writes it: :func:`load` checks a file against the format (every problem is a
:class:`~kbuild.errors.UsageError` naming the file and the JSON path), :func:`merge` combines recordings,
:func:`dumps` writes the canonical text, and :func:`call_specialization` turns one recorded specialisation
back into the :class:`kbuild.runtime.keys.CallSpecialization` the run time computes for such a call, so that
what a recording declares keys exactly as the run time keys the call.

Everything in the text is a function of the recorded facts: lists are sorted, a specialisation's ``id`` and
the ``compiler_options`` table's ids are content hashes, samples are the smallest distinct ones in canonical
order, and the derived ``sm_dependent`` marks are recomputed from the samples on every write. The same facts
give the same bytes, whichever process, worker or run recorded them first.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kbuild.canonical import canonical_json
from kbuild.errors import UsageError
from kbuild.record.machine import sm_dependent

FORMAT = "kbuild-recording"
VERSION = 1
#: Distinct samples kept per specialisation unless a recording says otherwise.
DEFAULT_SAMPLES = 8
#: The largest recording read (a recording of thousands of specialisations is a few MB).
MAX_BYTES = 128 * 2**20
#: Triton's backend options a specialisation shows: those a ``[tool.kbuild.kernels]`` declaration sets (when set). The
#: rest of Triton's parsed options is shared through the ``compiler_options`` table.
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "ptx_options")
#: Line width of the writer: a JSON value whose one-line form fits stays on one line.
WIDTH = 120


def content_id(value: Any) -> str:
    """16 hex digits of the sha256 of the canonical JSON of ``value``: the ids of the format."""
    return hashlib.sha256(canonical_json(value)).hexdigest()[:16]


def sample_order(sample: Mapping[str, Any]) -> bytes:
    """The order samples are kept and written in (the canonical bytes)."""
    return canonical_json(sample)


@dataclass
class Specialization:
    """One compiled specialisation of a kernel: what the key depends on, and the calls seen."""

    target: str
    triton: str
    signature: dict[str, str]
    constexprs: dict[str, Any]
    options: dict[str, Any]
    compiler_options: str
    heuristics: dict[str, Any] = field(default_factory=dict)
    autotune_config: int | None = None
    unsupported: str | None = None
    calls: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)
    samples_truncated: bool = False
    _id: str | None = field(default=None, repr=False, compare=False)

    def identity(self) -> dict[str, Any]:
        return {"target": self.target, "triton": self.triton, "signature": self.signature,
                "constexprs": self.constexprs, "options": self.options, "compiler_options": self.compiler_options,
                "heuristics": self.heuristics, "autotune_config": self.autotune_config,
                "unsupported": self.unsupported}

    @property
    def id(self) -> str:
        """The content id of :meth:`identity` (computed once: the identity fields are not changed after creation)."""
        if self._id is None:
            self._id = content_id(self.identity())
        return self._id

    def add_samples(self, samples: Iterable[Mapping[str, Any]], limit: int, *, truncated: bool = False) -> None:
        """Keep the ``limit`` smallest distinct samples of those held and ``samples``."""
        by_order = {sample_order(s): dict(s) for s in self.samples}
        for s in samples:
            by_order.setdefault(sample_order(s), dict(s))
        kept = sorted(by_order)
        self.samples_truncated = self.samples_truncated or truncated or len(kept) > limit
        self.samples = [by_order[k] for k in kept[:limit]]

    def to_json(self, *, derived: bool = True) -> dict[str, Any]:
        out = {"id": self.id, **self.identity(), "calls": self.calls, "samples": self.samples,
               "samples_truncated": self.samples_truncated}
        if derived:
            out["sm_dependent"] = sm_dependent(self.samples, self.constexprs)
        return out


@dataclass
class Kernel:
    """One ``@triton.jit`` function (with the autotuner it was called through, if any) and its specialisations."""

    module: str
    qualname: str
    name: str
    source_hash: str
    distribution: dict[str, str] | None
    autotune: dict[str, Any] | None = None
    """``{"key": [...], "configs": [...], "prunes": bool}``: the ``@triton.autotune`` the calls went through."""
    heuristics: dict[str, str] = field(default_factory=dict)
    """Name → ``"outside"`` (a ``@triton.heuristics`` layer above the autotuner: computed once per call, before
    the autotuner's key) or ``"inside"`` (below it, or no autotuner: computed for each config)."""
    globals: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What the function and its callees read at module level on the recording machine
    (:func:`kbuild.compile.folded.snapshot`): what a build sets back when its own import gives another
    ``source_hash``. Not part of the identity (the source hash already differs when these do)."""
    tunings: list[dict[str, Any]] = field(default_factory=list)
    specializations: dict[str, Specialization] = field(default_factory=dict)

    @property
    def function(self) -> str:
        return f"{self.module}:{self.qualname}"

    def identity(self) -> dict[str, Any]:
        return {"module": self.module, "qualname": self.qualname, "name": self.name,
                "source_hash": self.source_hash, "distribution": self.distribution, "autotune": self.autotune}

    def sort_key(self) -> tuple[str, bytes]:
        return (self.function, canonical_json(self.identity()))

    def add(self, spec: Specialization, limit: int) -> Specialization:
        """Add ``spec`` (or fold it into the held one with the same id); the held one."""
        held = self.specializations.get(spec.id)
        if held is None:
            held = copy.deepcopy(spec)
            held.samples, held.samples_truncated = [], False
            self.specializations[spec.id] = held
        else:
            held.calls += spec.calls
        held.add_samples(spec.samples, limit, truncated=spec.samples_truncated)
        return held

    def add_tunings(self, tunings: Iterable[Mapping[str, Any]]) -> None:
        by_order = {canonical_json(t): dict(t) for t in self.tunings}
        for t in tunings:
            by_order.setdefault(canonical_json(t), dict(t))
        self.tunings = [by_order[k] for k in sorted(by_order)]

    def in_order(self) -> list[Specialization]:
        """The specialisations in the order the file lists them (``specializations[j]``)."""
        return sorted(self.specializations.values(), key=lambda s: canonical_json(s.identity()))

    def to_json(self, *, derived: bool = True) -> dict[str, Any]:
        specs = self.in_order()
        return {**self.identity(), "function": self.function, "heuristics": dict(sorted(self.heuristics.items())),
                "globals": dict(sorted(self.globals.items())), "tunings": self.tunings, "specializations": [s.to_json(derived=derived) for s in specs]}


@dataclass
class Recording:
    """A whole recording: kernels, the shared compiler-option sets, the sample limit."""

    samples_per_specialization: int = DEFAULT_SAMPLES
    compiler_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    kernels: dict[bytes, Kernel] = field(default_factory=dict)
    paths: dict[tuple[bytes, str], str] = field(default_factory=dict, repr=False, compare=False)
    """Where a file read (:func:`from_json`) held each kernel and specialisation: ``(kernel identity, "")`` →
    ``"kernels[i]"``, ``(kernel identity, specialisation id)`` → ``"kernels[i].specializations[j]"`` (what an error
    about it names; the written order is :meth:`in_order`)."""

    def path_of(self, kernel: Kernel, spec: Specialization | None = None) -> str:
        """The JSON path of ``kernel`` (or of its ``spec``) in the file read, else in the written order."""
        ident = canonical_json(kernel.identity())
        got = self.paths.get((ident, spec.id if spec is not None else ""))
        if got is not None:
            return got
        i = self.in_order().index(kernel)
        return f"kernels[{i}]" if spec is None else f"kernels[{i}].specializations[{kernel.in_order().index(spec)}]"

    def kernel(self, template: Kernel) -> Kernel:
        """The held kernel with ``template``'s identity (added, without specialisations, when new)."""
        ident = canonical_json(template.identity())
        held = self.kernels.get(ident)
        if held is None:
            held = Kernel(template.module, template.qualname, template.name, template.source_hash,
                          copy.deepcopy(template.distribution), copy.deepcopy(template.autotune))
            self.kernels[ident] = held
        for name, place in template.heuristics.items():
            held.heuristics.setdefault(name, place)
        if not held.globals and template.globals:
            held.globals = copy.deepcopy(template.globals)
        return held

    def add_compiler_options(self, options: Mapping[str, Any]) -> str:
        """The id of ``options`` in the shared table (added when new)."""
        value = json.loads(json.dumps(dict(options)))
        ident = content_id(value)
        self.compiler_options.setdefault(ident, value)
        return ident

    def update(self, other: Recording) -> None:
        """Merge ``other`` into this recording (calls summed, samples and tunings united)."""
        for ident, options in other.compiler_options.items():
            self.compiler_options.setdefault(ident, copy.deepcopy(options))
        for kernel in other.kernels.values():
            held = self.kernel(kernel)
            held.add_tunings(kernel.tunings)
            for spec in kernel.specializations.values():
                held.add(spec, self.samples_per_specialization)

    def in_order(self) -> list[Kernel]:
        """The kernels in the order the file lists them (``kernels[i]``)."""
        return sorted(self.kernels.values(), key=Kernel.sort_key)

    def to_json(self, *, derived: bool = True) -> dict[str, Any]:
        """The document; ``derived=False`` leaves out what a reader recomputes (``sm_dependent``): a process's part
        file, merged by the parent."""
        kernels = self.in_order()
        used = {s.compiler_options for k in kernels for s in k.specializations.values()}
        return {"format": FORMAT, "version": VERSION, "samples_per_specialization": self.samples_per_specialization,
                "compiler_options": {k: v for k, v in sorted(self.compiler_options.items()) if k in used},
                "kernels": [k.to_json(derived=derived) for k in kernels]}

    def summary(self) -> dict[str, Any]:
        """Counts for people and ``--json``: per kernel its specialisations, targets and calls (those of the target
        with the most: a ``--mode cpu`` run specialises each call once per target)."""
        rows = []
        for k in sorted(self.kernels.values(), key=Kernel.sort_key):
            specs = list(k.specializations.values())
            per_target: dict[str, int] = {}
            for s in specs:
                per_target[s.target] = per_target.get(s.target, 0) + s.calls
            rows.append({"function": k.function, "source_hash": k.source_hash[:16],
                         "distribution": (f"{k.distribution['name']} {k.distribution['version']}"
                                          if k.distribution else None),
                         "specializations": len(specs), "calls": max(per_target.values(), default=0),
                         "targets": sorted({s.target for s in specs}),
                         "autotuned": k.autotune is not None, "unsupported": sum(1 for s in specs if s.unsupported),
                         "sm_dependent": sorted({n for s in specs for n in sm_dependent(s.samples, s.constexprs)})})
        return {"kernels": len(rows), "specializations": sum(r["specializations"] for r in rows),
                "calls": sum(r["calls"] for r in rows), "per_kernel": rows}


# ----------------------------------------------------------------------------------------------
# Writing


def dumps(recording: Recording) -> str:
    """The canonical text: sorted keys, a value on one line when it fits in :data:`WIDTH`, a final newline."""
    return _write(recording.to_json(), 0) + "\n"


def _write(value: Any, indent: int, used: int = 0) -> str:
    """``value`` at nesting ``indent`` (one space per level), after ``used`` characters of its line (a key)."""
    flat = json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(", ", ": "))
    if not isinstance(value, (dict, list)) or not value or indent + used + len(flat) <= WIDTH:
        return flat
    pad = " " * (indent + 1)
    if isinstance(value, dict):
        items = []
        for k in sorted(value):
            name = json.dumps(k, ensure_ascii=False)
            items.append(f"{pad}{name}: {_write(value[k], indent + 1, len(name) + 2)}")
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    return "[\n" + ",\n".join(pad + _write(v, indent + 1) for v in value) + "\n" + " " * indent + "]"


# ----------------------------------------------------------------------------------------------
# Reading


def load(path: str | os.PathLike[str], *, where: str | None = None) -> Recording:
    """The recording in the file ``path``; a :class:`UsageError` naming it and what is wrong otherwise."""
    from kbuild.jsonio import read_json_file

    name = where or str(path)
    return from_json(read_json_file(path, where=name, max_bytes=MAX_BYTES), where=name)


def from_json(doc: Any, *, where: str) -> Recording:
    """Check ``doc`` against the format and build the :class:`Recording` (derived fields are recomputed)."""
    r = _Reader(where)
    r.obj(doc, "")
    if doc.get("format") != FORMAT:
        r.fail("format", f"expected {FORMAT!r}, got {doc.get('format')!r}: not a kbuild recording")
    r.obj(doc, "", required={"format", "version", "samples_per_specialization", "compiler_options", "kernels"},
          exact=True)
    if type(doc["version"]) is not int or doc["version"] != VERSION:
        r.fail("version", f"version {doc['version']!r} is not supported: this kbuild reads version {VERSION}")
    limit = doc["samples_per_specialization"]
    if type(limit) is not int or not 1 <= limit <= 10_000:
        r.fail("samples_per_specialization", f"expected an integer from 1 to 10000, got {limit!r}")
    rec = Recording(samples_per_specialization=limit)
    r.obj(doc["compiler_options"], "compiler_options")
    for ident, options in doc["compiler_options"].items():
        r.obj(options, f"compiler_options.{ident}")
        if content_id(options) != ident:
            r.fail(f"compiler_options.{ident}", "the id is not the hash of the options (edited by hand?)")
        rec.compiler_options[ident] = options
    r.list(doc["kernels"], "kernels")
    for i, kd in enumerate(doc["kernels"]):
        _read_kernel(r, rec, kd, f"kernels[{i}]")
    return rec


_KERNEL_KEYS = {"module", "qualname", "name", "function", "source_hash", "distribution", "autotune", "heuristics",
                "tunings", "specializations"}
_SPEC_KEYS = {"id", "target", "triton", "signature", "constexprs", "options", "compiler_options", "heuristics",
              "autotune_config", "unsupported", "calls", "samples", "samples_truncated"}


#: A kernel's keys that a reader takes when present (written by a later kbuild of format version 1).
_KERNEL_OPTIONAL = {"globals"}
#: The kinds of a recorded global (:mod:`kbuild.compile.folded`).
_GLOBAL_KINDS = ("constexpr", "value", "jit", "text")


def _read_kernel(r: _Reader, rec: Recording, kd: Any, at: str) -> None:
    r.obj(kd, at, required=_KERNEL_KEYS)
    extra = sorted(set(kd) - _KERNEL_KEYS - _KERNEL_OPTIONAL)
    if extra:
        r.fail(at, f"unknown key {extra[0]!r}")
    folded = kd.get("globals", {})
    r.obj(folded, f"{at}.globals")
    for name, value in folded.items():
        r.obj(value, f"{at}.globals.{name}")
        if len(value) != 1 or next(iter(value)) not in _GLOBAL_KINDS:
            r.fail(f"{at}.globals.{name}", f"expected one of {', '.join(_GLOBAL_KINDS)} (a table of one key)")
    for name in ("module", "qualname", "name", "source_hash"):
        r.text(kd[name], f"{at}.{name}")
    if kd["function"] != f"{kd['module']}:{kd['qualname']}":
        r.fail(f"{at}.function", f"expected {kd['module']}:{kd['qualname']!s}, got {kd['function']!r}")
    dist = kd["distribution"]
    if dist is not None:
        r.obj(dist, f"{at}.distribution", required={"name", "version"}, exact=True)
        r.text(dist["name"], f"{at}.distribution.name")
        r.text(dist["version"], f"{at}.distribution.version")
    autotune = kd["autotune"]
    if autotune is not None:
        r.obj(autotune, f"{at}.autotune", required={"key", "configs", "prunes"}, exact=True)
        r.list(autotune["key"], f"{at}.autotune.key")
        r.list(autotune["configs"], f"{at}.autotune.configs")
        for j, c in enumerate(autotune["configs"]):
            r.obj(c, f"{at}.autotune.configs[{j}]", required={"kwargs", "num_warps", "num_stages", "num_ctas",
                                                              "maxnreg"})
            r.obj(c["kwargs"], f"{at}.autotune.configs[{j}].kwargs")
            r.launch_options(c, f"{at}.autotune.configs[{j}]")
        if type(autotune["prunes"]) is not bool:
            r.fail(f"{at}.autotune.prunes", "expected true or false")
    r.obj(kd["heuristics"], f"{at}.heuristics")
    for name, place in kd["heuristics"].items():
        if place not in ("outside", "inside"):
            r.fail(f"{at}.heuristics.{name}", f"expected \"outside\" or \"inside\", got {place!r}")
    r.list(kd["tunings"], f"{at}.tunings")
    n_configs = len(autotune["configs"]) if autotune is not None else 0
    for j, t in enumerate(kd["tunings"]):
        tat = f"{at}.tunings[{j}]"
        r.obj(t, tat, required={"target", "key", "configs", "choice", "source", "sm_count"}, exact=True)
        r.target(t["target"], f"{tat}.target")
        r.list(t["key"], f"{tat}.key")
        r.list(t["configs"], f"{tat}.configs")
        for c in [*t["configs"], *([t["choice"]] if t["choice"] is not None else [])]:
            if type(c) is not int or not 0 <= c < n_configs:
                r.fail(tat, f"config index {c!r} is not one of the autotuner's {n_configs} configs")
        if t["source"] not in ("measured", "triton-cache", None):
            r.fail(f"{tat}.source", f"expected \"measured\", \"triton-cache\" or null, got {t['source']!r}")
        if t["sm_count"] is not None and (type(t["sm_count"]) is not int or t["sm_count"] < 1):
            r.fail(f"{tat}.sm_count", f"expected a positive integer or null, got {t['sm_count']!r}")
    kernel = rec.kernel(Kernel(kd["module"], kd["qualname"], kd["name"], kd["source_hash"], dist, autotune,
                               heuristics=dict(kd["heuristics"]), globals=copy.deepcopy(folded)))
    ident = canonical_json(kernel.identity())
    rec.paths.setdefault((ident, ""), at)
    kernel.add_tunings(kd["tunings"])
    r.list(kd["specializations"], f"{at}.specializations")
    for j, sd in enumerate(kd["specializations"]):
        sat = f"{at}.specializations[{j}]"
        r.obj(sd, sat, required=_SPEC_KEYS)
        extra = sorted(set(sd) - _SPEC_KEYS - {"sm_dependent"})
        if extra:
            r.fail(sat, f"unknown key {extra[0]!r}")
        r.target(sd["target"], f"{sat}.target")
        r.text(sd["triton"], f"{sat}.triton")
        r.obj(sd["signature"], f"{sat}.signature")
        for name, ty in sd["signature"].items():
            r.signature_type(ty, f"{sat}.signature.{name}")
        for name in ("constexprs", "options", "heuristics"):
            r.obj(sd[name], f"{sat}.{name}")
        r.launch_options(sd["options"], f"{sat}.options")
        for name, value in sd["constexprs"].items():
            r.constexpr(value, f"{sat}.constexprs.{name}")
        if not isinstance(sd["compiler_options"], str) or sd["compiler_options"] not in rec.compiler_options:
            r.fail(f"{sat}.compiler_options", f"{sd['compiler_options']!r} is not in the compiler_options table")
        config = sd["autotune_config"]
        if config is not None and (type(config) is not int or not 0 <= config < n_configs):
            r.fail(f"{sat}.autotune_config", f"{config!r} is not one of the autotuner's {n_configs} configs")
        if sd["unsupported"] is not None:
            r.text(sd["unsupported"], f"{sat}.unsupported")
        if type(sd["calls"]) is not int or sd["calls"] < 0:
            r.fail(f"{sat}.calls", f"expected a count, got {sd['calls']!r}")
        if type(sd["samples_truncated"]) is not bool:
            r.fail(f"{sat}.samples_truncated", "expected true or false")
        r.list(sd["samples"], f"{sat}.samples")
        for k, sample in enumerate(sd["samples"]):
            r.obj(sample, f"{sat}.samples[{k}]", required={"args", "grid", "sm_count"}, exact=True)
            r.obj(sample["args"], f"{sat}.samples[{k}].args")
            for name, value in sample["args"].items():
                r.argument(value, f"{sat}.samples[{k}].args.{name}")
            if sample["grid"] is not None:
                r.list(sample["grid"], f"{sat}.samples[{k}].grid")
                for g, dim in enumerate(sample["grid"]):
                    if not isinstance(dim, (int, str)) or isinstance(dim, bool) or (isinstance(dim, int) and dim < 0):
                        r.fail(f"{sat}.samples[{k}].grid[{g}]", f"expected a non-negative integer, got {dim!r}")
            if type(sample["sm_count"]) is not int or sample["sm_count"] < 1:
                r.fail(f"{sat}.samples[{k}].sm_count", f"expected a positive integer, got {sample['sm_count']!r}")
        spec = Specialization(sd["target"], sd["triton"], dict(sd["signature"]), dict(sd["constexprs"]),
                              dict(sd["options"]), sd["compiler_options"], dict(sd["heuristics"]), config,
                              sd["unsupported"], sd["calls"], list(sd["samples"]), sd["samples_truncated"])
        if spec.id != sd["id"]:
            r.fail(f"{sat}.id", f"{sd['id']!r} is not the hash of the specialisation ({spec.id}; edited by hand?)")
        kernel.add(spec, rec.samples_per_specialization)
        rec.paths.setdefault((ident, spec.id), sat)


class _Reader:
    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, at: str, message: str) -> None:
        raise UsageError(f"{self.where}: {at or '(document)'}: {message}")

    def obj(self, value: Any, at: str, *, required: set[str] = frozenset(),  # type: ignore[assignment]
            exact: bool = False) -> None:
        if not isinstance(value, dict):
            self.fail(at, f"expected a JSON object, got {type(value).__name__}")
        missing = sorted(required - set(value))
        if missing:
            self.fail(at, f"missing {', '.join(missing)}")
        extra = sorted(set(value) - required)
        if exact and extra:
            self.fail(at, f"unknown key {extra[0]!r}")

    def list(self, value: Any, at: str) -> None:
        if not isinstance(value, list):
            self.fail(at, f"expected a JSON array, got {type(value).__name__}")

    def text(self, value: Any, at: str) -> None:
        if not isinstance(value, str) or not value:
            self.fail(at, f"expected a non-empty string, got {value!r}")

    def signature_type(self, value: Any, at: str) -> None:
        """A parameter's type in declaration notation (:func:`kbuild.declarations.signature.parse_type`)."""
        from kbuild.declarations.signature import SignatureError, parse_type

        try:
            parse_type(value)
        except SignatureError as exc:
            self.fail(at, str(exc))

    def constexpr(self, value: Any, at: str) -> None:
        """A recorded constexpr value (:func:`kbuild.declarations.signature.check_constexpr_value`)."""
        from kbuild.declarations.signature import SignatureError, check_constexpr_value

        try:
            check_constexpr_value(value, recorded=True)
        except SignatureError as exc:
            self.fail(at, str(exc))

    def launch_options(self, options: Mapping[str, Any], at: str) -> None:
        """The launch options (:data:`LAUNCH_OPTIONS`) among ``options``, where set, as the declarations check them
        (:func:`kbuild.declarations.space.check_option`, a recorded value); ``ptx_options`` a string, kept as
        recorded."""
        from kbuild.declarations.space import SpaceError, check_option

        for name in LAUNCH_OPTIONS:
            value = options.get(name)
            if value is None:
                continue
            if name == "ptx_options":
                self.text(value, f"{at}.{name}")
                continue
            try:
                check_option(name, value, f"{at}.{name}", recorded=True)
            except SpaceError as exc:
                self.fail(exc.key, exc.detail)

    def argument(self, value: Any, at: str, depth: int = 0) -> None:
        """An argument as a sample describes it (:func:`kbuild.record.recorder.describe`): null, a boolean, a string,
        a number, ``{"float": "nan" | "inf" | "-inf"}``, ``{"type": name}``, a tensor ``{"dtype", "shape",
        "strides"}`` or a tuple's items as an array."""
        if value is None or isinstance(value, (bool, int, float, str)):
            return
        if isinstance(value, list) and depth < 4:
            for i, item in enumerate(value):
                self.argument(item, f"{at}[{i}]", depth + 1)
            return
        if isinstance(value, dict) and set(value) == {"float"} and value["float"] in ("nan", "inf", "-inf"):
            return
        if isinstance(value, dict) and set(value) == {"type"} and isinstance(value["type"], str):
            return
        if isinstance(value, dict) and set(value) == {"dtype", "shape", "strides"}:
            self.text(value["dtype"], f"{at}.dtype")
            shape, strides = value["shape"], value["strides"]
            if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
                self.fail(f"{at}.shape", f"expected an array of non-negative integers, got {shape!r}")
            if strides is not None and (not isinstance(strides, list) or len(strides) != len(shape)
                                        or not all(type(d) is int for d in strides)):
                self.fail(f"{at}.strides", f"expected null or {len(shape)} integers, got {strides!r}")
            return
        self.fail(at, "expected a scalar, a tensor {dtype, shape, strides}, {\"float\": ...}, {\"type\": ...} or an "
                      f"array of those, got {json.dumps(value)[:80]}")

    def target(self, value: Any, at: str) -> None:
        from kbuild.targets import parse_target

        try:
            parse_target(value)
        except ValueError as exc:
            self.fail(at, str(exc))


def merge(recordings: Sequence[Recording], *, samples: int | None = None) -> Recording:
    """One recording holding all of ``recordings`` (kernels and specialisations united, calls summed, the
    ``samples`` smallest distinct samples kept; default: the largest limit among them)."""
    limit = samples if samples is not None else max((r.samples_per_specialization for r in recordings),
                                                    default=DEFAULT_SAMPLES)
    out = Recording(samples_per_specialization=limit)
    for r in recordings:
        out.update(r)
    return out


# ----------------------------------------------------------------------------------------------
# Back to the run time's terms


def split_options(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(launch options, the rest)`` of Triton's parsed backend options: the launch options
    (:data:`LAUNCH_OPTIONS`) that are set, shown on the specialisation, and everything else (launch options that are
    None included), shared through the ``compiler_options`` table. ``{**rest, **launch}`` is ``options`` again."""
    launch = {k: options[k] for k in LAUNCH_OPTIONS if options.get(k) is not None}
    rest = {k: v for k, v in options.items() if k not in launch}
    return launch, rest


def call_specialization(recording: Recording, kernel: Kernel, spec: Specialization) -> Any:
    """The :class:`kbuild.runtime.keys.CallSpecialization` of a recorded specialisation: the same value
    :func:`kbuild.runtime.keys.specialization_for_call` gives for a call that specialises this way, so its
    :meth:`~kbuild.runtime.keys.CallSpecialization.key` is the run time's key (``":1"`` arguments are typed as
    recorded, ``"i32:1"``)."""
    from kbuild.runtime.keys import CallSpecialization
    from kbuild.targets import parse_target

    ones = tuple(n for n, ty in spec.signature.items() if ty.endswith(":1"))
    signature = {n: (":1" if n in ones else ty) for n, ty in spec.signature.items()}
    options = {**copy.deepcopy(recording.compiler_options[spec.compiler_options]), **spec.options}
    return CallSpecialization(function=kernel.function, name=kernel.name, source_hash=kernel.source_hash,
                              signature=signature, constexprs=dict(spec.constexprs), options=options,
                              cc=parse_target(spec.target).cc, triton_version=spec.triton,
                              unsupported=spec.unsupported, ones=ones)


def finite(value: float) -> Any:
    """A float as the format holds it: itself, or ``{"float": "nan" | "inf" | "-inf"}`` (JSON has no such numbers)."""
    if math.isfinite(value):
        return value
    return {"float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}


__all__ = ["DEFAULT_SAMPLES", "FORMAT", "LAUNCH_OPTIONS", "VERSION", "Kernel", "Recording", "Specialization",
           "call_specialization", "content_id", "dumps", "finite", "from_json", "load", "merge", "split_options"]
