"""``kbuild tune --dry-run``: the level-1 space tuning would search, derived and pruned on this CPU; nothing measured.

``kbuild tune --recording FILE --dry-run [--only NAME ...]`` derives a space for each recorded kernel (one
specialisation each: the one the workload called most on ``--target``;
:func:`kbuild.tune.level1.subject.pick_specialization`), ``kbuild tune --suite --dry-run [--only NAME ...]`` for
the bench suite's kernels as if they declared no space (their autotune lists declare the tunable constexprs).
Each space is compiled point by point in kbuild's compile processes and pruned (:mod:`kbuild.tune.level1.prune`);
the report gives, per kernel, the space, what was pruned and why (counts per reason) and what is kept: a table on
stderr (every point's with one kernel), one JSON document with ``--json``. :func:`derived_suite_space` gives
``kbuild tune --suite --derive-space`` the kept points to tune on.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from kbuild.console import emit_json, print_table, progress
from kbuild.errors import UsageError
from kbuild.targets import Target


def _subjects(args: argparse.Namespace, target: Target, checks: dict[str, Any] | None = None
              ) -> tuple[list[tuple[str, Any]], list[str]]:
    """(short name, :class:`~kbuild.tune.level1.subject.Subject`) of every kernel to derive for, and notes on the
    kernels left out; ``checks`` receives a recorded kernel's output check by its short name."""
    checks = {} if checks is None else checks
    from kbuild.tune.level1.subject import find_kernels, from_bench, from_recording, pick_specialization

    out: list[tuple[str, Any]] = []
    notes: list[str] = []
    if args.recording:
        from kbuild.record.format import load
        from kbuild.tune.level1.output_check import RecordedOutputCheck

        where = f"--recording {args.recording}"
        recording = load(args.recording, where=where)
        for kernel in find_kernels(recording, args.only, where=where):
            spec = pick_specialization(kernel, target)
            if spec is None:
                notes.append(f"{kernel.function}: no specialisation for {target.name} that a declaration can hold")
                continue
            out.append((kernel.name, from_recording(recording, kernel, spec, where=where)))
            # block sizes shown safe by checking outputs on the recorded calls (the build's check, on this machine)
            checks[kernel.name] = RecordedOutputCheck(args.recording, kernel, spec, target=target.name)
        return out, notes
    from kbuild.bench.kernels import SUITE
    from kbuild.bench.spec import load_spec

    names = args.only or list(SUITE)
    unknown = [n for n in names if n not in SUITE]
    if unknown:
        raise UsageError(f"--only: unknown suite kernel {unknown[0]!r}; known: {', '.join(SUITE)}")
    for name in names:
        bench = load_spec(SUITE[name])
        if target.cc not in bench.archs:
            notes.append(f"{name}: the suite kernel does not support {target.name}")
            continue
        out.append((name, from_bench(bench, target)))
    return out, notes


def prune_all(subjects: list[tuple[str, Any]], *, max_points: int, jobs: int | None, timeout: float,
              enabled: bool, advance_extra: Callable[[], None] | None = None,
              checks: dict[str, Any] | None = None) -> list[Any]:
    """Derive and prune each subject's space (``checks``: output checks by short name), with one progress bar over
    every point."""
    from kbuild.tune.level1.derive import derive_space
    from kbuild.tune.level1.prune import prune

    derived = [(name, derive_space(subject, max_points=max_points, check_outputs=(checks or {}).get(name)))
               for name, subject in subjects]
    results = []
    with progress("prune", sum(len(d) for _, d in derived), enabled=enabled) as advance:
        for name, d in derived:
            def report(done: int, total: int, point: Any, name: str = name) -> None:
                advance(status=f"{name}: {done}/{total} {point.label}")

            results.append(prune(d, jobs=jobs, timeout=timeout, on_progress=report))
    return results


def _timeout() -> float:
    from kbuild.settings.sources import settings_from_table

    return float(settings_from_table({}, where="<defaults>").compile_timeout)


def run_dry(args: argparse.Namespace, target: Target) -> int:
    """``kbuild tune --dry-run`` (see the module docstring)."""
    if args.kernel:
        raise UsageError("--dry-run derives spaces for --recording FILE or --suite kernels; a project kernel's "
                         f"space is not derived yet ({args.kernel!r})")
    if not args.recording and not args.suite:
        raise UsageError("--dry-run needs --recording FILE or --suite")
    if args.max_points < 1:
        raise UsageError(f"--max-points must be at least 1, got {args.max_points}")
    started = time.perf_counter()
    checks: dict[str, Any] = {}
    subjects, notes = _subjects(args, target, checks)
    results = prune_all(subjects, max_points=args.max_points, jobs=args.jobs, timeout=_timeout(), checks=checks,
                        enabled=not args.json)
    seconds = time.perf_counter() - started
    if args.json:
        emit_json({"target": target.name, "seconds": round(seconds, 2), "jobs": results[0].jobs if results else None,
                   "notes": notes, "kernels": [{"name": n, **r.as_dict()} for (n, _), r in zip(subjects, results)]})
        return 0
    from kbuild.tune.level1.prune import REASONS

    rows = []
    for (name, subject), r in zip(subjects, results, strict=True):
        c = r.counts()
        spec = subject.origin.get("specialization")
        rows.append((name, spec[:8] if spec else "-", r.derived.default.label(), len(r.verdicts),
                     *(c[x] or "" for x in REASONS), len(r.kept), f"{r.seconds:.0f}s"))
    short = {"compile-error": "error", "shared-memory": "smem", "occupancy": "occup.", "wgmma-race": "race",
             "duplicate": "dup."}
    print_table(f"kbuild tune --dry-run: derived spaces on {target.name}, pruned on this CPU ({seconds:.0f} s; "
                "pruned per reason: error = compile error, smem = shared memory, occup. = occupancy, race = wgmma "
                "race, dup. = duplicate code)",
                ["kernel", "spec", "default", "space", *(short.get(x, x) for x in REASONS), "kept", "time"], rows)
    if len(results) == 1:
        r = results[0]
        print_table(None, ["point", "verdict", "regs", "spills (st/ld)", "shared", "warps/SM", "why"],
                    [(v.compiled.label, v.reason or "kept",
                      v.compiled.ptxas.registers if v.compiled.ptxas else "-",
                      f"{v.compiled.ptxas.spill_stores}/{v.compiled.ptxas.spill_loads}" if v.compiled.ptxas else "-",
                      v.compiled.shared, v.occupancy.warps_per_sm if v.occupancy else "-", v.detail)
                     for v in r.verdicts])
        for d in r.derived.dimensions:
            print(f"  {d.name}: {', '.join(map(str, d.values))} ({d.why})")
        for step in r.derived.thinned:
            print(f"  thinned: {step}")
    for (name, _), r in zip(subjects, results, strict=True):
        for c in r.derived.output_checks:
            cx = ", ".join(f"{k}={v}" for k, v in c["constexprs"].items())
            print(f"  {name}: {cx} {'shown safe' if c['accepted'] else 'left out'}: {c['why']}")
    for note in notes + [n for r in results for n in (*r.derived.notes, *r.notes)]:
        print(f"  note: {note}")
    return 0


def derived_suite_space(spec: Any, target: Target, *, max_points: int, jobs: int | None,
                        enabled: bool) -> tuple[Any, Any]:
    """(``spec`` with its ``space`` replaced by the kept points of its derived, pruned space, the
    :class:`~kbuild.tune.level1.prune.Pruned`) for ``kbuild tune --suite --derive-space``."""
    import dataclasses

    from kbuild.tune.level1.subject import from_bench

    (pruned,) = prune_all([(spec.name, from_bench(spec, target))], max_points=max_points, jobs=jobs,
                          timeout=_timeout(), enabled=enabled)
    return dataclasses.replace(spec, space=tuple(pruned.kept)), pruned
