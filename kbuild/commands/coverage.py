"""``kbuild coverage FILE... [--json] [--out FILE]``: one run-time coverage report of several processes'.

``KBUILD_RUNTIME_REPORT=cov/{pid}.json`` makes each process of a run (pytest-xdist workers, ``torchrun`` ranks)
write its own report (:mod:`kbuild.runtime.coverage`); this verb merges them (:func:`kbuild.runtime.coverage.merge`:
each specialisation and autotuning key once), prints the summary, and with ``--out`` writes the merged report.

Exit status, as a gate for CI: 0 when every specialisation was answered from a wheel and every autotuning key
from a shipped choice, 1 when Triton compiled or autotuned something (each listed with its reason), 2 when a file
is not such a report (the file and key named; nothing written).
"""

from __future__ import annotations

import argparse

from kbuild.console import emit_json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("coverage", help="merge and summarise kbuild.runtime coverage reports (KBUILD_RUNTIME_REPORT)",
                       description="Merge the coverage reports kbuild.runtime wrote at exit (KBUILD_RUNTIME_REPORT; "
                                   "{pid} in its path gives one file per process) and print what the wheels "
                                   "answered and what Triton compiled or autotuned, with the reasons. Exit status "
                                   "1 when anything was compiled or autotuned.")
    p.add_argument("reports", nargs="+", metavar="FILE", help="KBUILD_RUNTIME_REPORT files")
    p.add_argument("--out", metavar="FILE", help="write the merged report here (the same format)")
    p.add_argument("--json", action="store_true", help="print the merged report as JSON on stdout")
    p.add_argument("--limit", type=int, default=20, metavar="N", help="misses listed in the summary (default 20)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kbuild.jsonio import read_json_file
    from kbuild.runtime.coverage import check_report, merge, summary, write_report

    docs = [check_report(read_json_file(path, where=path), path) for path in args.reports]
    doc = merge(docs)
    if args.out:
        write_report(args.out, doc)
    if args.json:
        emit_json(doc)
    else:
        print(f"{len(docs)} report(s): " + summary(doc, limit=args.limit))
    t = doc["totals"]
    return 1 if t["misses"] or t["autotuned"] else 0


__all__ = ["add_parser", "run"]
