"""Run every reliability case of issue 13 and tally them per fault class.

    python benchmarks/reliability.py [--out benchmarks/results/reliability.json] [-- PYTEST_ARGS...]

A reliability case is a test marked ``@pytest.mark.hostile(fault=..., outcome=...)`` (see
``tests/hostile_helpers.py``). Extra pytest arguments go after ``--``: ``-- -n 2`` runs the cases in two
pytest-xdist workers (each case's mark travels to this process in its reports' ``user_properties``, which
``tests/conftest.py`` sets in every process that collects). This script runs exactly those tests through pytest (real nginx and
redis-server where a case needs them), records each case's result, and writes one JSON document:
for each fault class the number of cases, how many held, and the outcome kbuild promises for it
(a clean error, degraded with a warning, or served correct bytes). A case that fails, errors or is
skipped is counted as such; nothing in the tally is written by hand.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
OUTCOMES = ("clean error", "degraded with warning", "served correct bytes")


def _hostile(item: pytest.Item) -> tuple[str, str] | None:
    """The ``(fault, outcome)`` of a hostile case, None for another test; a malformed mark stops the run."""
    mark = item.get_closest_marker("hostile")
    if mark is None:
        return None
    fault, outcome = mark.kwargs.get("fault"), mark.kwargs.get("outcome")
    if not fault or outcome not in OUTCOMES:
        raise pytest.UsageError(f"{item.nodeid}: hostile mark needs fault= and outcome= in {OUTCOMES}")
    return fault, outcome


class _Tally:
    """A pytest plugin: the hostile mark of each case and its result."""

    def __init__(self) -> None:
        self.cases: dict[str, dict[str, Any]] = {}

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            hostile = _hostile(item)
            if hostile is not None:
                self.cases[item.nodeid] = {"fault": hostile[0], "outcome": hostile[1], "result": "not run"}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        case = self.cases.get(report.nodeid)
        if case is None:
            marks = [v for k, v in report.user_properties if k == "hostile"]
            if not marks:
                return
            fault, outcome = marks[0]
            case = self.cases.setdefault(report.nodeid, {"fault": fault, "outcome": outcome, "result": "not run"})
        if report.when == "call" or report.outcome != "passed":
            if report.skipped:
                case["result"] = "skipped"
            elif report.failed:
                case["result"] = "failed" if report.when == "call" else "error"
            elif case["result"] == "not run":
                case["result"] = "passed"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "reliability.json"))
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = ap.parse_args(argv)
    tally = _Tally()
    start = time.monotonic()
    status = pytest.main(["-q", "-m", "hostile", "-p", "no:cacheprovider", str(ROOT / "tests"), *args.pytest_args],
                         plugins=[tally])
    seconds = time.monotonic() - start
    classes: dict[str, dict[str, Any]] = defaultdict(lambda: {"cases": 0, "held": 0, "outcomes": set(), "not_held": []})
    for nodeid, case in sorted(tally.cases.items()):
        c = classes[case["fault"]]
        c["cases"] += 1
        c["outcomes"].add(case["outcome"])
        if case["result"] == "passed":
            c["held"] += 1
        else:
            c["not_held"].append({"case": nodeid, "result": case["result"]})
    doc = {
        "command": "python benchmarks/reliability.py" + "".join(" " + shlex.quote(a) for a in (argv or sys.argv[1:])),
        "python": platform.python_version(),
        "machine": "CPU only (no GPU): every case of issue 13 runs without one",
        "pytest_exit_status": int(status),
        "seconds": round(seconds, 1),
        "total_cases": sum(c["cases"] for c in classes.values()),
        "total_held": sum(c["held"] for c in classes.values()),
        "classes": [{"fault": fault, "cases": c["cases"], "held": c["held"], "outcome": " / ".join(sorted(c["outcomes"])),
                     "not_held": c["not_held"]} for fault, c in sorted(classes.items())],
        "cases": [{"case": nodeid, **case} for nodeid, case in sorted(tally.cases.items())],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    width = max((len(c["fault"]) for c in doc["classes"]), default=10)
    print(f"\n{'fault class':<{width}}  cases  held  outcome")
    for c in doc["classes"]:
        print(f"{c['fault']:<{width}}  {c['cases']:>5}  {c['held']:>4}  {c['outcome']}")
    print(f"{'total':<{width}}  {doc['total_cases']:>5}  {doc['total_held']:>4}   -> {out}")
    return 0 if status == 0 and doc["total_cases"] == doc["total_held"] else 1


if __name__ == "__main__":
    sys.exit(main())
