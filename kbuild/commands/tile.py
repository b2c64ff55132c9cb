"""``kbuild tile MODULE:FUNCTION --block M=1 --block N=4096``: synthesise a tile kernel's layouts, show the ranked
variants, and write its Gluon source (a module a ``[[tool.kbuild.kernels]]`` entry can name like any kernel).
An mma program (``loop("K")`` + ``mma``) takes ``--problem M,N,K`` and ``--arch`` (an architecture kbuild models,
:func:`kbuild.arch.modelled`: 80 or 90) instead of blocks: its variants are ranked tile configurations, each with
the layouts its mma fixes; an int4 one (``dequant``, e.g. ``int4_gemm_tile``) also reports the packed weight layout
the synthesiser derived."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kbuild.arch import DEFAULT_SM, modelled
from kbuild.console import emit_json, info, print_table, table_text
from kbuild.errors import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tile", help="synthesise a kbuild.tile kernel's layouts and emit Gluon",
                       description="Trace a kbuild.tile function, infer its thread-value layouts for each warp "
                                   "count, rank the assignments by the cost model and emit one Gluon kernel whose "
                                   "VARIANT constexpr selects among the best few.")
    p.add_argument("function", metavar="MODULE:FUNCTION", help="the tile function (imported from the current "
                                                               "directory or the installed packages)")
    p.add_argument("--block", action="append", default=[], metavar="DIM=N",
                   help="tile extent, a power of two: M (rows per program, default 1) and N (columns; required)")
    p.add_argument("--problem", metavar="M,N,K", help="mma programs: the problem the configurations are ranked for")
    p.add_argument("--arch", type=int, default=DEFAULT_SM, choices=modelled(),
                   help=f"mma programs: target (default {DEFAULT_SM})")
    p.add_argument("--warps", default="4,8", metavar="W,W", help="warp counts to synthesise for (default 4,8)")
    p.add_argument("--variants", type=int, default=3, help="assignments kept in the kernel (default 3)")
    p.add_argument("--write", type=Path, metavar="FILE", help="write the Gluon source to FILE (a .py module)")
    p.add_argument("--source", action="store_true", help="print the Gluon source")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.set_defaults(func=run)


def _load(ref: str) -> Any:
    """The function ``MODULE:FUNCTION`` names, its module imported from the current directory or the installed
    packages (:func:`kbuild.usercode.import_module`: whatever the import raises, ``sys.exit`` too, is one
    error naming the module)."""
    from kbuild import usercode

    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"MODULE:FUNCTION: {ref!r} is not 'package.module:function'")
    module = usercode.import_module(module_name, error=lambda m: UsageError(f"MODULE:FUNCTION {ref!r}: {m}"),
                                    paths=[str(Path.cwd())])
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UsageError(f"MODULE:FUNCTION: module {module_name!r} has no function {attr!r}")
    return fn


def _count(text: str, what: str) -> int:
    """A positive decimal integer written in ASCII digits (``int()`` also reads ``'٤'`` and ``'1_0'``)."""
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise UsageError(f"{what}: expected a positive integer")
    return int(text)


def _blocks(items: list[str], function: str) -> dict[str, int]:
    blocks = {"M": 1}
    for item in items:
        dim, sep, value = item.partition("=")
        if not sep or dim not in ("M", "N"):
            raise UsageError(f"--block {item!r}: expected M=<int> or N=<int>")
        blocks[dim] = _count(value, f"--block {item!r}")
    if "N" not in blocks:
        raise UsageError(f"{function}: a row-wise tile program needs --block N=<columns per program>")
    return blocks


def _warps(text: str) -> list[int]:
    warps = [_count(w.strip(), f"--warps {text!r}") for w in text.split(",") if w.strip()]
    if not warps:
        raise UsageError("--warps is empty")
    return warps


def _problem(text: str | None, function: str) -> tuple[int, int, int]:
    if text is None:
        raise UsageError(f"{function}: --problem M,N,K is required for an mma program (the sizes its tiles are "
                         "ranked for)")
    parts = text.split(",")
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() and int(p) > 0 for p in parts):
        raise UsageError(f"--problem {text!r}: expected three positive integers M,N,K")
    m, n, k = (int(p) for p in parts)
    return m, n, k


def _write(path: Path | None, source: str) -> None:
    from kbuild.fsutil import write_atomic

    if path is not None:
        try:
            write_atomic(path, source)
        except OSError as exc:
            raise UsageError(f"--write {path}: cannot write: {exc.strerror or exc}") from None


def _run_mma(args: argparse.Namespace, fn: Any) -> int:
    from kbuild.tile.gluon_mma import build_mma

    kernel = build_mma(fn, _problem(args.problem, args.function), arch=args.arch, variants=args.variants)
    rows: list[dict[str, Any]] = [{"variant": i, "num_warps": p.num_warps, "constexprs": p.constexprs, "cost": round(p.cost, 1),
             "parts": {k: round(x, 1) for k, x in p.parts.items()}, "copy": p.copy,
             "layouts": {"acc": p.acc.text(), "a": p.a_shared.text(), "b": p.b_shared.text()}}
            for i, p in enumerate(kernel.plans)]
    _write(args.write, kernel.source)
    doc = {"function": args.function, "kernel": kernel.program.name, "arch": kernel.arch,
           "problem": list(_problem(args.problem, args.function)), "signature": kernel.signature,
           "synthesis_seconds": round(kernel.seconds, 3), "variants": rows,
           "written": str(args.write) if args.write else None, "source": kernel.source if args.source else None}
    if args.json:
        emit_json(doc)
        return 0
    print_table(f"{kernel.program.name}: {len(rows)} variants for sm_{kernel.arch}, synthesised in "
                f"{kernel.seconds:.2f} s", ["variant", "tile", "warps", "stages", "modelled cycles", "accumulator"],
                [(r["variant"], "x".join(str(r["constexprs"][d]) for d in ("BLOCK_M", "BLOCK_N", "BLOCK_K")),
                  r["num_warps"], r["constexprs"]["STAGES"], r["cost"], r["layouts"]["acc"]) for r in rows])
    if args.source:
        print(kernel.source)
    if args.write is not None:
        info(f"wrote {table_text(args.write)}")  # stderr: stdout is for --source; a name may not be UTF-8
    return 0


def _run_int4(args: argparse.Namespace, fn: Any) -> int:
    from kbuild.tile.gluon_quant import build_int4

    kernel = build_int4(fn, _problem(args.problem, args.function), arch=args.arch, variants=args.variants)
    lay = kernel.packing
    rows: list[dict[str, Any]] = [{"variant": i, "num_warps": p.num_warps, "constexprs": p.constexprs,
                                   "cost": round(p.cost, 1), "parts": {k: round(x, 1) for k, x in p.parts.items()},
                                   "layouts": {"acc": p.acc.text(), "w_shared": p.w_shared.text(),
                                               "register_chain": p.chain.gluon("v")}}
                                  for i, p in enumerate(kernel.plans)]
    _write(args.write, kernel.source)
    tk, tn = lay.tile_kn()
    doc = {"function": args.function, "kernel": kernel.program.name, "arch": kernel.arch,
           "problem": list(_problem(args.problem, args.function)), "signature": kernel.signature,
           "packing": {"tile": list(lay.tile), "n_by_k": [tn, tk], "operand": lay.operand, "nibble_order": list(lay.nibble_order),
                       "bytes_per_thread": lay.bytes_per_thread, "group": lay.group},
           "synthesis_seconds": round(kernel.seconds, 3), "variants": rows,
           "written": str(args.write) if args.write else None, "source": kernel.source if args.source else None}
    if args.json:
        emit_json(doc)
        return 0
    print_table(f"{kernel.program.name}: {len(rows)} variants for sm_{kernel.arch}, synthesised in "
                f"{kernel.seconds:.2f} s; weights packed in {tn}x{tk} (N x K) tiles, nibbles "
                f"{list(lay.nibble_order)}", ["variant", "N x tokens x K", "warps", "stages", "split-K", "modelled cycles"],
                [(r["variant"], "x".join(str(r["constexprs"][d]) for d in ("BLOCK_N", "BLOCK_T", "BLOCK_K")),
                  r["num_warps"], r["constexprs"]["STAGES"], r["constexprs"]["SPLIT_K"], r["cost"]) for r in rows])
    if args.source:
        print(kernel.source)
    if args.write is not None:
        info(f"wrote {table_text(args.write)}")  # stderr: stdout is for --source; a name may not be UTF-8
    return 0


def run(args: argparse.Namespace) -> int:
    from kbuild.tile.build import build
    from kbuild.tile.lang import trace

    if args.variants < 1:
        raise UsageError(f"--variants {args.variants}: expected at least 1")
    fn = _load(args.function)
    kinds = {op.kind for op in trace(fn).ops}
    if "dequant" in kinds:
        return _run_int4(args, fn)
    if "mma" in kinds or "loop" in kinds:  # a K loop without its mma: the mma analysis says what is missing
        return _run_mma(args, fn)
    kernel = build(fn, _blocks(args.block, args.function), warps=_warps(args.warps), variants=args.variants)
    rows: list[dict[str, Any]] = []
    for i, v in enumerate(kernel.variants):
        chosen = v.synthesis.ranked[v.rank]
        rows.append({"variant": i, "num_warps": v.num_warps, "cost": round(chosen.cost, 1),
                     "parts": {k: round(x, 1) for k, x in chosen.parts.items()},
                     "layouts": [str(b) for b in chosen.layouts.values()]})
    _write(args.write, kernel.source)
    doc = {"function": args.function, "kernel": kernel.program.name, "blocks": kernel.blocks,
           "signature": kernel.signature, "synthesis_seconds": round(kernel.seconds, 3), "variants": rows,
           "written": str(args.write) if args.write else None, "source": kernel.source if args.source else None}
    if args.json:
        emit_json(doc)
        return 0
    print_table(f"{kernel.program.name}: {len(rows)} variants, synthesised in {kernel.seconds:.2f} s",
                ["variant", "warps", "modelled cost", "layouts"],
                [(r["variant"], r["num_warps"], r["cost"], "; ".join(r["layouts"])) for r in rows])
    if args.source:
        print(kernel.source)
    if args.write is not None:
        info(f"wrote {table_text(args.write)}")  # stderr: stdout is for --source; a name may not be UTF-8
    return 0
