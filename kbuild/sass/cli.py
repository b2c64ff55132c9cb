"""``kbuild sass show|stats|diff|verify|fuzz``: inspect, check and fuzz SASS rewrites of a cubin."""

from __future__ import annotations

import argparse
import collections
from pathlib import Path
from typing import Any

from kbuild import console
from kbuild.errors import ExitCode, UsageError
from kbuild.settings.model import MAX_SEED

# The SASS engine (numpy, the [tune] extra) is imported by the verbs, not here: the kbuild CLI builds its
# parser on the core dependencies alone.


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("sass", help="inspect, verify and fuzz SASS reorderings of a cubin")
    sub = p.add_subparsers(dest="sass_command", metavar="VERB", required=True)

    def common(sp: argparse.ArgumentParser, *, cubin: bool = True) -> None:
        if cubin:
            sp.add_argument("cubin", type=Path, help="the cubin")
        sp.add_argument("--kernel", help="kernel name (default: the only kernel in the cubin)")
        sp.add_argument("--json", action="store_true", help="print one JSON document on stdout")

    sp = sub.add_parser("show", help="list the instructions with control codes, block and pin reason")
    common(sp)
    sp.set_defaults(func=_show)
    sp = sub.add_parser("stats", help="instruction, block, pinned and unknown-opcode counts")
    common(sp)
    sp.set_defaults(func=_stats)
    sp = sub.add_parser("diff", help="which instructions moved between an original and a rewritten cubin")
    sp.add_argument("original", type=Path)
    sp.add_argument("rewritten", type=Path)
    common(sp, cubin=False)
    sp.set_defaults(func=_diff)
    sp = sub.add_parser("verify", help="check a rewritten cubin against its original "
                                       f"(exit {ExitCode.REJECTED:d} if rejected)")
    sp.add_argument("original", type=Path)
    sp.add_argument("rewritten", type=Path)
    sp.add_argument("--no-disassemble", action="store_true", help="skip the nvdisasm text comparison")
    common(sp, cubin=False)
    sp.set_defaults(func=_verify)
    sp = sub.add_parser("fuzz", help="random legal move sequences, each written, verified and re-decoded")
    common(sp)
    sp.add_argument("--sequences", type=int, default=1000)
    sp.add_argument("--max-depth", type=int, default=64)
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--full-checks", type=int, default=2, help="sequences also re-decoded as whole ELF files")
    sp.add_argument("--kinds", help="comma-separated edit kinds to mix in: moves,far,yield,reuse,stall "
                                    "(default: one-slot moves only, as before issue 15)")
    sp.set_defaults(func=_fuzz)


def _schedule(path: Path, kernel: str | None):
    from .schedule import Schedule

    return Schedule.from_cubin(path, kernel)


def _show(args: argparse.Namespace) -> int:
    from . import control

    sched = _schedule(args.cubin, args.kernel)
    an = sched.analysis
    rows = []
    for i, (ins, sem, w) in enumerate(zip(an.instructions, an.sems, an.words)):
        rows.append({"offset": 16 * i, "block": int(an.block_of[i]), "control": str(control.decode(w)),
                     "text": ins.text, "pinned": sem.pinned})
    if args.json:
        console.emit_json({"kernel": an.kernel, "sm": sched.cubin.sm, "instructions": rows})
    else:
        for r in rows:
            pin = f"  # pinned: {r['pinned']}" if r["pinned"] else ""
            console.console.print(f"/*{r['offset']:05x}*/ B{r['block']:<3d} {r['control']}  {r['text']}{pin}",
                                  markup=False, highlight=False)
    return 0


def stats_of(sched) -> dict[str, Any]:
    an = sched.analysis
    pinned = collections.Counter(s.pinned for s in an.sems if s.pinned)
    unknown = collections.Counter(x.base for x, s in zip(an.instructions, an.sems)
                                  if s.pinned and s.pinned.startswith("opcode "))
    opcodes = collections.Counter(x.base for x in an.instructions)
    return {
        "kernel": an.kernel, "sm": sched.cubin.sm, "family": an.spec.family, "instructions": an.n,
        "blocks": len(an.block_start), "pinned": int(an.pinned.sum()),
        "pinned_fraction": round(an.pinned_fraction(), 4), "pinned_reasons": dict(pinned.most_common()),
        "unknown_opcodes": dict(unknown.most_common()), "constraints": len(an.cons_p),
        "legal_moves": int(sched.legal_moves().sum()), "opcodes": dict(opcodes.most_common()),
    }


def _stats(args: argparse.Namespace) -> int:
    st = stats_of(_schedule(args.cubin, args.kernel))
    if args.json:
        console.emit_json(st)
        return 0
    console.print_table(f"{st['kernel']} (sm_{st['sm']}, {st['family']} table)", ["what", "value"], [
        ("instructions", st["instructions"]), ("basic blocks", st["blocks"]),
        ("pinned", f"{st['pinned']} ({100 * st['pinned_fraction']:.1f}%)"),
        ("distance constraints", st["constraints"]), ("legal moves now", st["legal_moves"]),
        ("unknown opcodes", ", ".join(f"{k}×{v}" for k, v in st["unknown_opcodes"].items()) or "none"),
    ])
    console.print_table("pinned, by reason", ["reason", "count"], st["pinned_reasons"].items())
    return 0


def _read(path: Path) -> bytes:
    from . import elf

    return elf.load(path).data


def _diff(args: argparse.Namespace) -> int:
    from .verify import Verifier

    original, rewritten = _read(args.original), _read(args.rewritten)
    v = Verifier.from_bytes(original, args.kernel, origin=str(args.original))
    order, problems = v.mapping(rewritten)
    if order is None:
        raise UsageError(f"{args.rewritten}: not a reordering of {args.original}: {'; '.join(problems)}")
    moved = [{"offset": 16 * t, "was": 16 * int(x), "text": v.an.instructions[int(x)].text}
             for t, x in enumerate(order.tolist()) if t != x]
    if args.json:
        console.emit_json({"kernel": v.an.kernel, "moved": moved, "problems": problems})
    else:
        console.info(f"{len(moved)} instruction(s) of {v.an.kernel} changed slot")
        for m in moved:
            console.console.print(f"  0x{m['offset']:05x} (was 0x{m['was']:05x})  {m['text']}", markup=False)
    return 0


def _verify(args: argparse.Namespace) -> int:
    from .verify import Verifier

    original, rewritten = _read(args.original), _read(args.rewritten)
    v = Verifier.from_bytes(original, args.kernel, origin=str(args.original))
    problems = v.check(rewritten, disassemble_check=not args.no_disassemble)
    if args.json:
        console.emit_json({"kernel": v.an.kernel, "accepted": not problems, "problems": problems})
    elif problems:
        console.console.print(f"rejected: {len(problems)} problem(s)", markup=False)
        for p in problems[:40]:
            console.console.print(f"  - {p}", markup=False)
    else:
        console.info(f"accepted: {args.rewritten} keeps every dependency of {v.an.kernel}")
    return ExitCode.OK if not problems else ExitCode.REJECTED


#: Bounds of ``kbuild sass fuzz``: a million sequences of at most 10,000 moves (a kernel has a few thousand
#: instructions; each sequence is written and verified, about a millisecond a move).
MAX_SEQUENCES = 10**6
MAX_DEPTH = 10**4


def _fuzz(args: argparse.Namespace) -> int:
    from .fuzz import KINDS, fuzz

    if not 1 <= args.sequences <= MAX_SEQUENCES or not 1 <= args.max_depth <= MAX_DEPTH:
        raise UsageError(f"--sequences must be 1 to {MAX_SEQUENCES:,} and --max-depth 1 to {MAX_DEPTH:,}, got "
                         f"{args.sequences} and {args.max_depth}")
    if not 0 <= args.seed <= MAX_SEED:
        raise UsageError(f"--seed must be 0 to {MAX_SEED:,}, got {args.seed}")
    if args.full_checks < 0:
        raise UsageError(f"--full-checks must not be negative, got {args.full_checks}")
    kinds = None
    if args.kinds:
        kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown or not kinds:
            raise UsageError(f"--kinds: unknown kind(s) {unknown}; choose from {','.join(KINDS)}")
    sched = _schedule(args.cubin, args.kernel)
    with console.progress(f"fuzz {sched.kernel}", args.sequences, enabled=not args.json) as advance:
        res = fuzz(sched, sequences=args.sequences, max_depth=args.max_depth, seed=args.seed,
                   full_checks=args.full_checks, progress=advance, kinds=kinds)
    if args.json:
        console.emit_json(res)
    else:
        console.print_table(f"fuzz {res['kernel']} (sm_{res['sm']})", ["sequences", "verified", "mismatches",
                                                                       "verifier_rejections", "pinned_fraction"],
                            [(res["sequences"], res["verified"], res["mismatches"], res["verifier_rejections"],
                              res["pinned_fraction"])])
    return 0 if res["mismatches"] == 0 and res["verifier_rejections"] == 0 else 1
