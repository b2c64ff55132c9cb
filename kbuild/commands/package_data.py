"""``kbuild package-data``: run the pipeline and write the shipped cubins as package data.

For projects that run their Triton kernels just in time (``ship = "package-data"``)::

    kbuild package-data --config pyproject.toml --out build/lib/mypkg [--package mypkg]

writes ``build/lib/mypkg/_kbuild/`` (``index.json``, ``<sha256>.cubin``, ``__init__.py``; see
:mod:`kbuild.build.package_data`). Every kernel × target is written (the baseline where there is no tuning result)
unless ``[tool.kbuild] package_data = "tuned"``; ``--include-untuned`` writes them all whatever it says.
"""

from __future__ import annotations

import argparse
import os

from kbuild.commands.common import add_config_args, settings_from_args, target_list
from kbuild.console import emit_json, info, print_table, table_text, warn


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("package-data", help="write tuned cubins + index into a package (Triton-JIT packages)",
                       description=__doc__.splitlines()[0] if __doc__ else None)
    add_config_args(p)
    p.add_argument("--out", required=True, metavar="PACKAGE_DIR",
                   help="the import package's folder (with its __init__.py) in the tree that becomes the wheel")
    p.add_argument("--package", metavar="NAME", help="import name to enable (default: the kernels' top-level package)")
    p.add_argument("--kernel", action="append", metavar="NAME", help="only this kernel (repeatable)")
    p.add_argument("--include-untuned", action="store_true",
                   help="ship baseline cubins too, even under package_data = \"tuned\"")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kbuild.build.package_data import write_package_data
    from kbuild.build.pipeline import run_pipeline
    from kbuild.build.recorded import RecordingReport, coverage_lines
    from kbuild.errors import UsageError
    from kbuild.fsutil import check_output_dir
    from kbuild.runtime.index import DATA_DIR

    settings = settings_from_args(args)
    out = check_output_dir(args.out, "--out")  # before any work
    if args.package is not None and not (args.package.isascii()
                                         and all(part.isidentifier() for part in args.package.split("."))):
        raise UsageError(f"--package {args.package!r}: not an import name (ASCII identifiers joined by dots)")
    if os.path.lexists(out / DATA_DIR) and not (out / DATA_DIR).is_dir():
        raise UsageError(f"--out {out}: {out / DATA_DIR} exists and is not a directory")
    if settings.ship != "package-data":
        warn(f"{settings.config_file}: ship = {settings.ship!r}; writing package data anyway")
    reports: list[RecordingReport] = []
    builds = run_pipeline(settings, kernels=args.kernel, targets=target_list(args), on_recordings=reports.append)
    try:
        result = write_package_data(settings, builds, out, package=args.package,
                                    include_untuned=args.include_untuned)
    except OSError as exc:
        name = f" {exc.filename}" if exc.filename else ""
        raise UsageError(f"--out {out}: cannot write{name}: {exc.strerror or exc}") from None
    entries = result.index["entries"]
    loud = result.nothing_ships(settings)
    if loud and not args.include_untuned:
        warn(loud)
    recorded = None
    if reports:
        recorded = {**reports[-1].as_json(), "coverage": coverage_lines(reports[-1], result.index, result.data_dir)}
        if not args.json:
            for line in [*reports[-1].lines, *recorded["coverage"]]:
                info(f"recordings: {table_text(line)}")
    if args.json:
        emit_json({"package": result.package, "data_dir": str(result.data_dir),
                   "files": [str(p) for p in result.files],
                   "entries": [{"key": k, "kernel": e["kernel"], "target": e["target"]["name"], "tuned": e["tuned"],
                                "speedup": e["speedup"], "cubin_sha256": e["cubin_sha256"]} for k, e in entries.items()],
                   "skipped": [{"kernel": k, "target": t, "reason": r} for k, t, r in result.skipped],
                   "recordings": recorded})
    else:
        rows = [(e["kernel"], e["target"]["name"], k[:12], "tuned" if e["tuned"] else "baseline",
                 f"×{e['speedup']:.3f}" if e["speedup"] else "") for k, e in entries.items()]
        rows += [(k, t, "", "not shipped", r) for k, t, r in result.skipped]
        print_table(f"kbuild package-data — {result.data_dir}", ["kernel", "target", "key", "ships", "note"], rows)
    return 0
