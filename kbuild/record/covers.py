"""What a wheel covers, without running anything: its indexes' specialisations, and a recording checked against them.

``kbuild inspect WHEEL`` shows :func:`shipped_specializations` (kernels × specialisations × targets, from each
``<package>/_kbuild/index.json``); ``kbuild inspect WHEEL --recording FILE`` adds :func:`recording_coverage`: for each
specialisation a ``kbuild record`` run launched (:mod:`kbuild.record`), whether the wheel answers it, and why not.

"Answers" is the run time's own test (:func:`kbuild.runtime.lookup.nearest`): the recorded call's baseline key,
computed as the run time computes it (:func:`kbuild.record.format.call_specialization`), is an entry's key; the
distribution component is the recording's (the run time's when the recorded version is installed). An entry without
Triton's metadata answers only after Triton compiled (index version 1: ``post-compile``). For an autotuned kernel
each recorded tuning's key must also be an entry's ``autotune`` key for that target, else Triton autotunes it. What
the key does not cover (Triton metadata against the call's options, the cubin's own checks) is the run time's and
``kbuild inspect``'s cubin check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kbuild.runtime.index import Index, ShippedEntry, autotune_keys


def _spec_of(entry: Mapping[str, Any]) -> dict[str, Any]:
    options = entry.get("options") or {}
    return {"signature": dict(entry.get("signature") or {}), "constexprs": dict(entry.get("constexprs") or {}),
            "options": {k: options[k] for k in ("num_warps", "num_stages", "num_ctas", "maxnreg")
                        if options.get(k) is not None}}


def shipped_specializations(indexes: Sequence[Index]) -> list[dict[str, Any]]:
    """One row per function and specialisation the indexes ship: ``{"package", "function", "kernel",
    "signature", "constexprs", "options", "targets": [...], "autotune": {target: key}, "zero_jit": bool,
    "tuned": [targets]}``, sorted by function, then specialisation."""
    import json

    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for index in indexes:
        for entry in index.entries.values():
            spec = _spec_of(entry)
            ident = (index.package, str(entry["function"]), json.dumps(spec, sort_keys=True, default=str))
            target = str(entry["target"].get("name", ""))
            row = rows.setdefault(ident, {"package": index.package, "function": entry["function"],
                                          "kernel": entry.get("kernel"), **spec, "targets": [], "autotune": {},
                                          "zero_jit": True, "tuned": []})
            row["targets"] = sorted({*row["targets"], target})
            if entry.get("autotune"):
                row["autotune"][target] = autotune_keys(entry)[0]
            row["zero_jit"] = row["zero_jit"] and "triton_metadata" in entry
            if entry.get("tuned"):
                row["tuned"] = sorted({*row["tuned"], target})
    return [rows[k] for k in sorted(rows)]


def recording_coverage(indexes: Sequence[Index], recording: Any) -> dict[str, Any]:
    """Each recorded specialisation and tuning, answered by the indexes or not (with the reason and the nearest
    entry's differing key fields): ``{"specializations": n, "answered": n, "tunings": n, "tunings_answered": n,
    "rows": [...], "tuning_rows": [...]}``."""
    from kbuild.record.format import call_specialization
    from kbuild.runtime.lookup import nearest

    by_function: dict[str, list[ShippedEntry]] = {}
    for index in indexes:
        for function, entries in index.by_function().items():
            by_function.setdefault(function, []).extend(entries)
    rows: list[dict[str, Any]] = []
    tunings: list[dict[str, Any]] = []
    for kernel in sorted(recording.kernels.values(), key=lambda k: k.sort_key()):
        candidates = by_function.get(kernel.function, [])
        for spec in sorted(kernel.specializations.values(), key=lambda s: s.id):
            row: dict[str, Any] = {"function": kernel.function, "target": spec.target, "signature": spec.signature,
                                   "constexprs": spec.constexprs, "options": spec.options, "calls": spec.calls,
                                   "answered": False, "stage": None, "entry": None, "reason": None, "nearest": None}
            if spec.unsupported:
                row["reason"] = f"the call cannot be declared: {spec.unsupported}"
            elif not candidates:
                row["reason"] = "the wheel ships no entry for this function"
            else:
                call = call_specialization(recording, kernel, spec)
                found, diffs = nearest(candidates, call, distribution=lambda _entry, k=kernel: k.distribution)
                if found is not None and not diffs:
                    row.update(answered=True, entry=found.key,
                               stage="zero-jit" if "triton_metadata" in found.entry else "post-compile")
                elif found is not None:
                    row["reason"] = f"no entry has this call's key; nearest differs in {'; '.join(diffs[:3])}"
                    row["nearest"] = {"entry": found.key, "kernel": found.entry.get("kernel"),
                                      "target": found.entry["target"].get("name"), "differences": diffs}
            rows.append(row)
        for tuning in kernel.tunings:
            tunings.append(_tuning_row(kernel, tuning, candidates))
    return {"specializations": len(rows), "answered": sum(r["answered"] for r in rows), "tunings": len(tunings),
            "tunings_answered": sum(t["answered"] for t in tunings), "rows": rows, "tuning_rows": tunings}


def _tuning_row(kernel: Any, tuning: Mapping[str, Any], candidates: Sequence[ShippedEntry]) -> dict[str, Any]:
    key = list(tuning.get("key") or [])
    target = tuning.get("target")
    shipped = [c for c in candidates if c.entry.get("autotune") and c.entry["target"].get("name") == target]
    row: dict[str, Any] = {"function": kernel.function, "target": target, "key": key, "answered": False,
                           "entry": None, "reason": None}
    exact = next((c for c in shipped if key in autotune_keys(c.entry)), None)
    if exact is not None:
        row.update(answered=True, entry=exact.key)
    elif shipped:
        best = min(shipped, key=lambda c: sum(a != b for a, b in zip(key, c.entry["autotune"]["key"])))
        diffs = [f"[{i}]: recorded {a!r}, shipped {b!r}" for i, (a, b) in enumerate(zip(key, best.entry["autotune"]["key"]))
                 if a != b]
        row["reason"] = f"Triton autotunes it: the nearest shipped key differs in {'; '.join(diffs) or 'length'}"
    else:
        row["reason"] = f"Triton autotunes it: the wheel ships no autotuning choice for {target}"
    return row


__all__ = ["recording_coverage", "shipped_specializations"]
