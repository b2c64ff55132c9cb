"""Coverage at run time: which specialisations the wheel answered, which Triton compiled or autotuned, and why.

The loading paths tell :data:`kbuild.runtime.state.STATE`'s :class:`Coverage` what they decided, once per
specialisation and process, where they decide it anyway (a compile that is about to happen, an autotuner's first
call, a key it is about to benchmark): a **hit** (the shipped cubin answered, stage ``zero-jit`` or
``post-compile``), a **miss** (Triton compiles: the reason, and where the nearest shipped entry of the function
differs, from the lookup's explanation), an autotuning key **answered** from the wheel or **autotuned** by Triton.
Nothing is counted on a call after a specialisation's first: those calls are Triton's own and kbuild is not on
their path (:mod:`kbuild.runtime.direct`), so calls are not counted.

``KBUILD_RUNTIME_REPORT`` (the settings' ``runtime_report``) writes :func:`report` when the process exits: a file
path gets the JSON document (written atomically), ``-`` a short summary on stderr (:func:`summary`). ``{pid}`` in a
path becomes the process id, so that each process of a run (pytest-xdist workers, ``torchrun`` ranks) writes its
own; :func:`merge` (``kbuild coverage FILE...``) makes one report of them.

``KBUILD_RUNTIME=strict`` (:class:`CoverageError`): the first call that would compile or autotune raises, one line
naming the kernel, the specialisation and the nearest entry's differing field. So does a kernel whose package ships
no index, once kbuild's runtime is enabled in the process (strict has nothing to check before a package enables it).

The report, ``format`` ``"kbuild-runtime-coverage"``, ``version`` 1::

    {"format": ..., "version": 1, "mode": "on" | "strict",
     "packages": {package: {"index": path, "entries": n}},
     "totals": {"kernels", "specializations", "hits", "misses", "autotune_answered", "autotuned"},
     "kernels": {"module:qualname": {
        "package": the enabled package shipping entries for it, or null, "shipped_entries": n,
        "hits": n, "misses": n, "autotune_answered": n, "autotuned": n,
        "specializations": [{"outcome": "hit" | "miss", "stage", "target", "signature", "constexprs", "options",
                             "entry": key | null, "reason": null | text,
                             "nearest": null | {"entry", "kernel", "target", "differences": [...]}}],
        "autotuning": [{"outcome": "answered" | "autotuned", "key": [...], "target", "entry", "reason",
                        "nearest"}]}},
     "calls": "not counted"}

Lists are sorted, so the same run gives the same document.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("kbuild.runtime")

REPORT_FORMAT = "kbuild-runtime-coverage"
REPORT_VERSION = 1
#: ``KBUILD_RUNTIME_REPORT`` item that prints the summary on stderr.
STDERR = "-"
#: In a ``KBUILD_RUNTIME_REPORT`` path: the writing process's id.
PID = "{pid}"


class CoverageError(RuntimeError):
    """``KBUILD_RUNTIME=strict``: a call would compile or autotune (the message is one line)."""


@dataclass
class _Kernel:
    package: str | None = None
    shipped_entries: int = 0
    specializations: dict[str, dict[str, Any]] = field(default_factory=dict)
    autotuning: dict[str, dict[str, Any]] = field(default_factory=dict)


def _id(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def describe(call: Any) -> dict[str, Any]:
    """A specialisation in declaration terms (a :class:`kbuild.runtime.keys.CallSpecialization`): the target, the
    signature, constexprs and the launch options a declaration sets."""
    options = {k: call.options[k] for k in ("num_warps", "num_stages", "num_ctas", "maxnreg")
               if call.options.get(k) is not None}
    return {"target": f"sm_{call.cc}", "signature": call.declaration(), "constexprs": _plain(call.constexprs),
            "options": options}


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def nearest_of(entry: Any, differences: Sequence[str]) -> dict[str, Any] | None:
    """The ``nearest`` field: the closest shipped entry (a :class:`~kbuild.runtime.index.ShippedEntry`) and its
    differing key fields, most telling first."""
    if entry is None:
        return None
    return {"entry": entry.key, "kernel": entry.entry.get("kernel"), "target": entry.entry["target"].get("name"),
            "differences": list(differences)}


class Coverage:
    """What the loading paths decided per kernel (``module:qualname``), once per specialisation."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.kernels: dict[str, _Kernel] = {}

    def clear(self) -> None:
        with self.lock:
            self.kernels.clear()

    def _kernel(self, function: str, package: str | None, shipped: int) -> _Kernel:
        k = self.kernels.get(function)
        if k is None:
            k = self.kernels[function] = _Kernel()
        if package is not None:
            k.package = package
        k.shipped_entries = max(k.shipped_entries, shipped)
        return k

    def specialization(self, function: str, spec: Mapping[str, Any], *, hit: bool, package: str | None = None,
                       shipped: int = 0, stage: str | None = None, entry: str | None = None,
                       reason: str | None = None, nearest: dict[str, Any] | None = None) -> bool:
        """Count one specialisation of ``function`` (the first outcome of a specialisation stands; a hit replaces
        an earlier miss, as the post-compile substitution answers what the zero-JIT path could not). Returns
        whether it was new."""
        row = {"outcome": "hit" if hit else "miss", "stage": stage, **_plain(dict(spec)), "entry": entry,
               "reason": reason, "nearest": nearest}
        sid = _id({k: spec.get(k) for k in ("target", "signature", "constexprs", "options", "triton")})
        with self.lock:
            k = self._kernel(function, package, shipped)
            old = k.specializations.get(sid)
            if old is None or (hit and old["outcome"] == "miss"):
                k.specializations[sid] = row
            return old is None

    def autotune(self, function: str, key: Sequence[Any], *, answered: bool, target: str | None,
                 package: str | None = None, shipped: int = 0, entry: str | None = None, reason: str | None = None,
                 nearest: dict[str, Any] | None = None) -> bool:
        """Count one autotuning key of ``function``: answered from the wheel, or autotuned by Triton."""
        row = {"outcome": "answered" if answered else "autotuned", "key": _plain(list(key)), "target": target,
               "entry": entry, "reason": reason, "nearest": nearest}
        with self.lock:
            k = self._kernel(function, package, shipped)
            kid = _id([row["key"], target])
            if kid in k.autotuning:
                return False
            k.autotuning[kid] = row
            return True

    def report(self, *, mode: str, packages: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """The report document (the module docstring)."""
        with self.lock:
            kernels = {}
            for function in sorted(self.kernels):
                k = self.kernels[function]
                specs = sorted(k.specializations.values(), key=_id)
                tunes = sorted(k.autotuning.values(), key=_id)
                kernels[function] = {
                    "package": k.package, "shipped_entries": k.shipped_entries,
                    "hits": sum(s["outcome"] == "hit" for s in specs),
                    "misses": sum(s["outcome"] == "miss" for s in specs),
                    "autotune_answered": sum(t["outcome"] == "answered" for t in tunes),
                    "autotuned": sum(t["outcome"] == "autotuned" for t in tunes),
                    "specializations": specs, "autotuning": tunes}
        totals = {"kernels": len(kernels),
                  "specializations": sum(len(k["specializations"]) for k in kernels.values()),
                  **{n: sum(k[n] for k in kernels.values())
                     for n in ("hits", "misses", "autotune_answered", "autotuned")}}
        return {"format": REPORT_FORMAT, "version": REPORT_VERSION, "mode": mode,
                "packages": {p: dict(packages[p]) for p in sorted(packages)}, "totals": totals, "kernels": kernels,
                "calls": "not counted: after its first call a specialisation runs on Triton's own path"}


def summary(doc: Mapping[str, Any], *, limit: int = 20) -> str:
    """A few lines for people: the totals, then each miss and autotuned key with its reason."""
    t = doc["totals"]
    lines = [f"kbuild.runtime coverage ({doc['mode']}): {t['kernels']} kernel(s), {t['specializations']} "
             f"specialisation(s): {t['hits']} answered from the wheel, {t['misses']} compiled by Triton; autotuning "
             f"keys: {t['autotune_answered']} answered, {t['autotuned']} autotuned"]
    misses = [(f, s) for f, k in doc["kernels"].items() for s in k["specializations"] if s["outcome"] == "miss"]
    misses += [(f, a) for f, k in doc["kernels"].items() for a in k["autotuning"] if a["outcome"] == "autotuned"]
    for function, row in misses[:limit]:
        what = f"autotune key {row['key']}" if "key" in row else _spec_text(row)
        lines.append(f"  miss {function} {what}: {row['reason']}")
    if len(misses) > limit:
        lines.append(f"  ... and {len(misses) - limit} more (KBUILD_RUNTIME_REPORT=FILE has them all)")
    return "\n".join(lines)


def _spec_text(spec: Mapping[str, Any]) -> str:
    sig = ", ".join(f"{n}: {t}" for n, t in (spec.get("signature") or {}).items())
    const = ", ".join(f"{n}={v}" for n, v in (spec.get("constexprs") or {}).items())
    opts = ", ".join(f"{n}={v}" for n, v in (spec.get("options") or {}).items())
    return f"[{spec.get('target')}] ({sig}) {{{const}}} {opts}".rstrip()


def strict_message(function: str, spec: Mapping[str, Any] | str, action: str, reason: str) -> str:
    """The one line a strict failure says."""
    what = spec if isinstance(spec, str) else _spec_text(spec)
    text = f"KBUILD_RUNTIME=strict: {function} would {action} {what}: {reason}"
    return " ".join(text.split())


# ----------------------------------------------------------------------------------------------
# The report at exit

_registered: list[bool] = []


def register_at_exit(report: Callable[[], Mapping[str, Any]]) -> None:
    """Write ``report()`` when the process exits (once per process; where to write it is read then)."""
    if not _registered:
        _registered.append(True)
        atexit.register(write_configured, report)


def write_configured(report: Callable[[], Mapping[str, Any]]) -> None:
    """``KBUILD_RUNTIME_REPORT``'s report (``report()``): the JSON to each path, the summary to stderr for ``-``.
    Never raises (it runs at exit): a problem is a warning."""
    from kbuild.errors import ConfigError
    from kbuild.settings.variables import env_setting

    try:
        targets = env_setting("runtime_report")
    except ConfigError as exc:
        log.warning("%s; no coverage report written", exc)
        return
    if not targets:
        return
    doc = report()
    for target in targets:
        try:
            if target == STDERR:
                print(summary(doc), file=sys.stderr)
            else:
                write_report(target, doc)
        except Exception as exc:  # at exit: say it, never fail
            log.warning("cannot write the kbuild.runtime coverage report to %s: %s", target, exc)


def write_report(path: str, doc: Mapping[str, Any]) -> None:
    """``doc`` as JSON at ``path`` (``{pid}`` in it: this process's id), atomically (a reader sees the old file or
    the whole new one)."""
    from kbuild.fsutil import write_atomic

    write_atomic(path.replace(PID, str(os.getpid())), json.dumps(doc, indent=1, sort_keys=True) + "\n")


# ----------------------------------------------------------------------------------------------
# Reports of several processes


def check_report(doc: Any, where: str) -> Mapping[str, Any]:
    """``doc`` if it is a report this version writes; else :class:`~kbuild.errors.UsageError` naming ``where`` and
    the key."""
    from kbuild.errors import UsageError

    if not isinstance(doc, Mapping) or doc.get("format") != REPORT_FORMAT:
        raise UsageError(f"{where}: format: expected {REPORT_FORMAT!r} (a KBUILD_RUNTIME_REPORT file)")
    if doc.get("version") != REPORT_VERSION:
        raise UsageError(f"{where}: version: expected {REPORT_VERSION}, got {doc.get('version')!r}")
    for key, kind in (("mode", str), ("packages", Mapping), ("kernels", Mapping)):
        if not isinstance(doc.get(key), kind):
            raise UsageError(f"{where}: {key}: expected {'a string' if kind is str else 'an object'}")
    for package, info in doc["packages"].items():
        if not isinstance(info, Mapping):
            raise UsageError(f"{where}: packages.{package}: expected an object")
    for function, k in doc["kernels"].items():
        at = f"{where}: kernels.{function}"
        if not isinstance(k, Mapping):
            raise UsageError(f"{at}: expected an object")
        if not (k.get("package") is None or isinstance(k["package"], str)):
            raise UsageError(f"{at}.package: expected a package name or null")
        if type(k.get("shipped_entries", 0)) is not int:
            raise UsageError(f"{at}.shipped_entries: expected an integer")
        for key in ("specializations", "autotuning"):
            rows = k.get(key)
            if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
                raise UsageError(f"{at}.{key}: expected a list of objects")
        for i, r in enumerate(k["specializations"]):
            if r.get("outcome") not in ("hit", "miss"):
                raise UsageError(f"{at}.specializations[{i}].outcome: expected 'hit' or 'miss'")
        for i, r in enumerate(k["autotuning"]):
            if r.get("outcome") not in ("answered", "autotuned") or not isinstance(r.get("key"), list):
                raise UsageError(f"{at}.autotuning[{i}]: expected an outcome 'answered' or 'autotuned' and a key list")
    return doc


def merge(docs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One report of several processes' (each as :func:`check_report` accepts): every specialisation and autotuning
    key once, a hit standing over a miss of the same specialisation as within one process; the mode is the
    reports' own, or ``"mixed"``."""
    merged = Coverage()
    packages: dict[str, Mapping[str, Any]] = {}
    for doc in docs:
        packages.update(doc["packages"])
        for function, k in doc["kernels"].items():
            pkg, shipped = k.get("package"), k.get("shipped_entries", 0)
            for r in k["specializations"]:
                spec = {f: r.get(f) for f in ("target", "signature", "constexprs", "options")}
                merged.specialization(function, spec, hit=r["outcome"] == "hit", package=pkg, shipped=shipped,
                                      stage=r.get("stage"), entry=r.get("entry"), reason=r.get("reason"),
                                      nearest=r.get("nearest"))
            for r in k["autotuning"]:
                merged.autotune(function, r["key"], answered=r["outcome"] == "answered", target=r.get("target"),
                                package=pkg, shipped=shipped, entry=r.get("entry"), reason=r.get("reason"),
                                nearest=r.get("nearest"))
            if not k["specializations"] and not k["autotuning"]:
                merged._kernel(function, pkg, shipped)
    modes = sorted({str(d["mode"]) for d in docs})
    return merged.report(mode=modes[0] if len(modes) == 1 else "mixed", packages=packages)


__all__ = ["PID", "REPORT_FORMAT", "REPORT_VERSION", "STDERR", "Coverage", "CoverageError", "check_report", "describe",
           "merge", "nearest_of", "register_at_exit", "strict_message", "summary", "write_configured", "write_report"]
