"""Pruning a level-1 space on a CPU, before any GPU time is spent: :func:`prune`.

Every point of a :class:`~kbuild.tune.level1.derive.DerivedSpace` is compiled for the subject's target in kbuild's
compile processes (:class:`kbuild.compile.workers.DeadlinePool`, ``jobs`` at a time, each compile stopped past
``timeout`` seconds: the ``compile_timeout`` setting's default unless the caller gives one), exactly as a build
compiles it (:func:`kbuild.compile.triton_aot.hermetic_compile`: line info off, a private Triton cache), keeping
ptxas's own resource report (:mod:`kbuild.compile.ptxas_report`) and Triton's metadata. A point is then pruned
with the first reason that holds (:data:`REASONS`):

* ``compile-error``: Triton or ptxas failed, or the compile ran past its deadline;
* ``shared-memory``: Triton's ``shared`` (the dynamic shared memory a block asks for) is over what a block may
  have on the target (:attr:`kbuild.arch.Limits.shared_per_block`): Triton refuses to load it;
* ``occupancy``: no block fits on an SM (:mod:`kbuild.tune.level1.occupancy`: registers x warps, shared memory),
  so it cannot launch; or a ``maxnreg`` cap that keeps no more warps resident than the same point without it
  (the cap only exists to raise occupancy; it can only cost);
* ``spills``: ptxas reports spill stores or loads, beyond the default's (a spilling default stays the baseline);
* ``wgmma-race``: the cubin has a wgmma register race (triton-lang/triton#9433; its outputs depend on timing);
* ``duplicate``: the same machine code as a point kept before it (the kernel's SASS, registers, shared memory,
  warps and cluster size): timing it again would measure the same kernel.

The default configuration (the space's first point: what the workload ran) is never pruned unless it fails to
compile; what the rules find on it is reported. Architectures without :class:`kbuild.arch.Limits` get no shared
memory or occupancy check (noted).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kbuild.bench.spec import Config
from kbuild.compile.ptxas_report import PtxasReport, PtxasReportError, parse
from kbuild.compile.workers import Deadline, DeadlinePool

from .compile import DEFAULT_TIMEOUT, default_jobs, wgmma_races
from .derive import DerivedSpace
from .occupancy import Occupancy, occupancy
from .subject import Source, Subject

#: Why a point is pruned, in the order the rules are tried.
REASONS = ("compile-error", "shared-memory", "occupancy", "spills", "wgmma-race", "duplicate")

#: ``(done, total, verdict)`` after each point's compile.
Progress = Callable[[int, int, "PointCompile"], None]


@dataclass(frozen=True)
class PointCompile:
    """One point's compile, as plain data (what a compile process sends back)."""

    label: str
    compile_s: float
    error: str | None = None
    shared: int = 0
    """Triton's ``shared``: dynamic shared memory per block, in bytes."""
    num_warps: int = 0
    """Warps per block as compiled (warp specialisation can add some)."""
    num_ctas: int = 1
    ptxas: PtxasReport | None = None
    ptxas_log: str = ""
    """ptxas's ``-v`` output for this compile, as ptxas wrote it."""
    code: str = ""
    """A digest of the machine code: the kernel's ``.text``, registers, shared memory, warps, cluster size."""
    races: tuple[str, ...] = ()
    race_check: str | None = None
    ptx: str | None = None
    """The PTX ptxas compiled (only with ``keep_code``: tests run ptxas on it again)."""
    cubin: bytes | None = None
    """The cubin (only with ``keep_code``: the GPU test loads it)."""


@dataclass(frozen=True)
class Verdict:
    """One point: kept, or pruned with its reason."""

    config: Config
    compiled: PointCompile
    occupancy: Occupancy | None
    reason: str | None = None
    detail: str = ""
    same_as: str | None = None

    @property
    def kept(self) -> bool:
        return self.reason is None

    def as_dict(self) -> dict[str, Any]:
        c, p = self.compiled, self.compiled.ptxas
        return {"label": c.label, "config": self.config.as_dict(), "kept": self.kept, "reason": self.reason,
                "detail": self.detail, "same_as": self.same_as, "compile_s": round(c.compile_s, 3),
                "error": c.error, "shared": c.shared, "num_warps": c.num_warps, "num_ctas": c.num_ctas,
                "registers": p.registers if p else None, "spill_stores": p.spill_stores if p else None,
                "spill_loads": p.spill_loads if p else None, "stack": p.stack if p else None,
                "occupancy": self.occupancy.as_dict() if self.occupancy else None,
                "wgmma_races": list(c.races), "code": c.code[:16] or None}


@dataclass(frozen=True)
class Pruned:
    """A pruned space: every point's verdict, in the space's order (the default first)."""

    derived: DerivedSpace
    verdicts: tuple[Verdict, ...]
    seconds: float
    jobs: int
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def kept(self) -> list[Config]:
        return [v.config for v in self.verdicts if v.kept]

    @property
    def pruned(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.kept]

    def counts(self) -> dict[str, int]:
        """Points pruned per reason (every reason listed, 0 included)."""
        out = dict.fromkeys(REASONS, 0)
        for v in self.pruned:
            out[v.reason or ""] += 1
        return out

    def as_dict(self) -> dict[str, Any]:
        s = self.derived.subject
        return {"kernel": s.name, "target": s.target.name, "origin": dict(s.origin), "space": self.derived.as_dict(),
                "size": len(self.verdicts), "kept": len(self.kept), "pruned": self.counts(),
                "seconds": round(self.seconds, 2), "jobs": self.jobs, "notes": list(self.notes),
                "points": [v.as_dict() for v in self.verdicts]}


# ----------------------------------------------------------------------------------------------
# Compiling one point (in a compile process)


@functools.cache
def _function(source: Source) -> Any:
    return source.load()


def _code_digest(cubin: bytes, kernel: str, registers: int, shared: int, num_warps: int, num_ctas: int) -> str:
    from kbuild.sass.elf import Cubin

    cb = Cubin(cubin)
    h = hashlib.sha256(cb.section_bytes(cb.text(kernel)))
    h.update(f"|{registers}|{shared}|{num_warps}|{num_ctas}".encode())
    return h.hexdigest()


def compile_point(subject: Subject, config: Config, *, timeout: float | None = DEFAULT_TIMEOUT,
                  keep_code: bool = False) -> PointCompile:
    """Compile one point of ``subject``'s space for its target (see the module docstring); a failure is a result
    with ``error``, never an exception."""
    from kbuild.compile.triton_aot import ast_source_class, hermetic_compile, triton_constexprs
    from kbuild.declarations.signature import ast_source_args

    label = config.label()
    started = time.perf_counter()
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import make_backend

        fn = _function(subject.source)
        args = ast_source_args(list(fn.arg_names), subject.signature, subject.all_constexprs(config))
        src = ast_source_class(fn)(fn=fn, **{**args, "constexprs": triton_constexprs(args["constexprs"])})
        cc = subject.target.cc
        options = make_backend(GPUTarget("cuda", cc, 32)).parse_options({**subject.options, **config.options()})
        log: list[str] = []
        compiled = hermetic_compile(src, cc, dict(options.__dict__), timeout=timeout, ptxas_log=log)
    except Exception as exc:  # Triton raises many kinds; any of them means this point does not build
        return PointCompile(label, time.perf_counter() - started, _first_lines(f"{type(exc).__name__}: {exc}"))
    md = compiled.metadata
    name, cubin, ptx = str(md.name), compiled.asm["cubin"], compiled.asm.get("ptx")
    try:
        report = parse(log[0] if log else "", name)
    except PtxasReportError as exc:
        return PointCompile(label, time.perf_counter() - started, f"no ptxas resource report: {exc}")
    races, skipped = wgmma_races(cubin, name, ptx)
    code = _code_digest(cubin, name, report.registers, int(md.shared), int(md.num_warps), int(md.num_ctas))
    return PointCompile(label, time.perf_counter() - started, None, int(md.shared), int(md.num_warps),
                        int(md.num_ctas), report, log[0] if log else "", code, races, skipped,
                        ptx if keep_code else None, cubin if keep_code else None)


def _first_lines(text: str, limit: int = 600) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[:2] + lines[2:][-2:])[:limit]


# ----------------------------------------------------------------------------------------------
# The rules


def _verdicts(derived: DerivedSpace, compiles: Sequence[PointCompile]) -> list[Verdict]:
    subject = derived.subject
    row = subject.target.architecture
    configs = derived.space.configs
    occ = [occupancy(row, registers=c.ptxas.registers, num_warps=c.num_warps, shared=c.shared)
           if c.error is None and c.ptxas is not None else None for c in compiles]
    base = compiles[0]
    base_stores = base.ptxas.spill_stores if base.ptxas else 0
    base_loads = base.ptxas.spill_loads if base.ptxas else 0
    by_label = {c.label(): i for i, c in enumerate(configs)}
    out: list[Verdict] = []
    seen_code: dict[str, str] = {}
    for i, (config, c, o) in enumerate(zip(configs, compiles, occ, strict=True)):
        reason, detail, same = None, "", None
        p = c.ptxas
        if c.error is not None or p is None:
            reason, detail = "compile-error", c.error or "no ptxas report"
        elif row.limits is not None and c.shared > row.limits.shared_per_block:
            reason = "shared-memory"
            detail = f"{c.shared} bytes of shared memory per block > {row.limits.shared_per_block} on {row.name}"
        elif o is not None and o.blocks_per_sm == 0:
            reason = "occupancy"
            detail = (f"no block fits on an SM ({o.limiter}: {p.registers} registers x {c.num_warps} warps, "
                      f"{c.shared} bytes of shared memory)")
        elif p.spill_stores > base_stores or p.spill_loads > base_loads:
            reason = "spills"
            detail = f"ptxas: {p.spill_stores} bytes spill stores, {p.spill_loads} bytes spill loads"
            if base_stores or base_loads:
                detail += f" (the default: {base_stores}, {base_loads})"
        elif c.races:
            reason, detail = "wgmma-race", f"{len(c.races)} wgmma register race(s), first {c.races[0]}"
        elif config.maxnreg and o is not None:
            sibling = by_label.get(Config(dict(config.constexprs), config.num_warps, config.num_stages, None,
                                          config.num_ctas, config.ptx_options).label())
            so = occ[sibling] if sibling is not None else None
            if so is not None and so.warps_per_sm >= o.warps_per_sm:
                reason = "occupancy"
                detail = (f"maxnreg={config.maxnreg} keeps {o.warps_per_sm} warps per SM resident, no more than "
                          f"ptxas's own allocation ({compiles[sibling].ptxas.registers} registers: "  # type: ignore[union-attr,index]
                          f"{so.warps_per_sm} warps)")
        if reason is None and c.code in seen_code:
            reason, same = "duplicate", seen_code[c.code]
            detail = f"the same machine code as {same}"
        if i == 0 and reason is not None and reason != "compile-error":  # the default stays: the baseline
            detail, reason, same = f"the default, kept (would be pruned: {reason}: {detail})", None, None
        if reason is None:
            seen_code.setdefault(c.code, c.label)
        out.append(Verdict(config, c, o, reason, detail, same))
    return out


# ----------------------------------------------------------------------------------------------
# The pool


def prune(derived: DerivedSpace, *, jobs: int | None = None, timeout: float | None = None,
          on_progress: Progress | None = None, keep_code: bool = False) -> Pruned:
    """Compile every point of ``derived`` and prune it (see the module docstring). ``jobs``: compile processes
    (default: one per core, less one; 0 compiles in this process, with ptxas's deadline only); ``timeout``:
    seconds per compile (default: the ``compile_timeout`` setting's default)."""
    started = time.perf_counter()
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    jobs = default_jobs() if jobs is None else jobs
    configs = derived.space.configs
    subject = derived.subject
    results: list[PointCompile | None] = [None] * len(configs)
    done = 0
    if jobs == 0:
        for i, config in enumerate(configs):
            results[i] = compile_point(subject, config, timeout=timeout, keep_code=keep_code)
            done += 1
            if on_progress is not None:
                on_progress(done, len(configs), results[i])  # type: ignore[arg-type]
    else:
        pool = DeadlinePool(jobs)
        try:
            futures = {pool.submit(timeout, _compile_in_child, subject, config, timeout, keep_code): i
                       for i, config in enumerate(configs)}
            for future in concurrent.futures.as_completed(futures):
                i = futures[future]
                try:
                    results[i] = future.result()
                except Deadline as exc:
                    results[i] = PointCompile(configs[i].label(), exc.seconds,
                                              f"compile ran past {exc.seconds:g} s (compile_timeout) and was stopped")
                except Exception as exc:  # the process died (killed, out of memory): this point failed
                    results[i] = PointCompile(configs[i].label(), 0.0,
                                              _first_lines(f"compile process failed: {type(exc).__name__}: {exc}"))
                done += 1
                if on_progress is not None:
                    on_progress(done, len(configs), results[i])  # type: ignore[arg-type]
        finally:
            pool.close(now=True)
    compiles = [r for r in results if r is not None]
    assert len(compiles) == len(configs)
    notes = []
    if subject.target.architecture.limits is None:
        notes.append(f"{subject.target.name}: no SM limits modelled (kbuild.arch): shared memory and occupancy not "
                     "checked")
    return Pruned(derived, tuple(_verdicts(derived, compiles)), time.perf_counter() - started, jobs, tuple(notes))


def _compile_in_child(subject: Subject, config: Config, timeout: float, keep_code: bool) -> PointCompile:
    """:func:`compile_point` in a compile process, its file descriptor 2 kept in a file while it runs: Triton's
    passes print a whole MLIR module there when one fails (PlanCTA on some ``num_ctas = 2`` points), which would
    bury the progress bar; the failure's last lines go into the point's error instead."""
    with tempfile.TemporaryFile(mode="w+b") as held:
        saved = os.dup(2)
        os.dup2(held.fileno(), 2)
        try:
            out = compile_point(subject, config, timeout=timeout, keep_code=keep_code)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        if out.error is not None:
            held.seek(0)
            tail = [line for line in held.read().decode(errors="replace").splitlines() if line.strip()][-2:]
            if tail:
                out = dataclasses.replace(out, error=_first_lines(out.error + "\n" + "\n".join(tail), 900))
    return out


__all__ = ["REASONS", "PointCompile", "Pruned", "Verdict", "compile_point", "prune"]
