"""The `kbuild tune` results table (markdown) and summary (JSON) from a folder of ``*.tune.json`` reports.

    python benchmarks/tune_table.py benchmarks/results/h200/tune [--json OUT.json]

Per kernel: the search region, the movable instructions, each algorithm's search best and re-timed
speedup with its evaluations, and what ships (the acceptance run's speedup and 95% CI, against its
A/A spread). Below the table: the geometric mean and maximum of what ships (a kept baseline counts
as 1.0×), the accepted schedules' checks, and how PPO fared against the best other search, where a
difference inside the kernel's A/A spread is a tie. Everything is read from the reports; nothing is
typed in.

Reports are read with :func:`kbuild.jsonio.read_json_file` and checked against the shape ``kbuild tune``
writes (:func:`check_report`) before anything is computed: a report that is not JSON or not that shape
is one line on stderr naming the file and the key, exit 2, and no summary file is written.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kbuild.errors import UsageError
from kbuild.fsutil import write_atomic
from kbuild.jsonio import read_json_file
from kbuild.tune import api as tune_api

ALGOS = ("random", "greedy", "ppo")


REQUIRED = ("algorithms", "decision", "accepted", "evaluations", "seconds", "movable_instructions")


def _speedup(ratio: float | None) -> str:
    return "—" if ratio is None or math.isnan(ratio) else f"{1.0 / ratio:.3f}"


def _noise(rep: dict[str, Any]) -> float:
    spreads = [a.get("confirmed_aa_spread") for a in rep["algorithms"].values()] + [rep["decision"].get("aa_spread")]
    return max((s for s in spreads if s is not None), default=0.0)


def _score(a: dict[str, Any]) -> float:
    r = a.get("confirmed_ratio")
    return a["best_ratio"] if r is None or math.isnan(r) else r


def ppo_outcome(rep: dict[str, Any]) -> str | None:
    """PPO against the best other search in one report, by re-timed ratios and the kernel's A/A spread; None
    when the report has no PPO search or nothing to compare it with."""
    algos = rep["algorithms"]
    if "ppo" not in algos or len(algos) < 2:
        return None
    other = min(_score(a) for k, a in algos.items() if k != "ppo")
    return tune_api.ppo_outcome(_score(algos["ppo"]), other, _noise(rep))


# --- the shape of a report --------------------------------------------------------------------------


class BadReport(Exception):
    """A report that is not the shape ``kbuild tune`` writes: the key, and what is wrong with it."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")


def _kind(value: Any) -> str:
    """A JSON value's kind, for messages (never the value: it may hold terminal escapes)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _positive(v: Any) -> bool:
    return _number(v) and v > 0


def _non_negative(v: Any) -> bool:
    return _number(v) and v >= 0


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _pair(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 2 and all(_non_negative(x) for x in v)


def _text(v: Any) -> bool:
    return isinstance(v, str) and v.isprintable()


Check = tuple[Callable[[Any], bool], str]
POSITIVE: Check = (_positive, "a positive number")
NON_NEGATIVE: Check = (_non_negative, "a number ≥ 0")
COUNT: Check = (_count, "a whole number ≥ 0")
PAIR: Check = (_pair, "a [low, high] pair of numbers")
TEXT: Check = (_text, "a printable string")
BOOL: Check = (lambda v: isinstance(v, bool), "true or false")
OBJECT: Check = (lambda v: isinstance(v, dict), "an object")
INDEX: Check = (lambda v: v is None or _count(v), "a whole number ≥ 0 or null")


def _field(obj: dict[str, Any], key: str, at: str, check: Check, *, required: bool = True,
           nullable: bool = False) -> Any:
    """``obj[key]`` when it passes ``check`` (absent: None unless ``required``; null allowed if ``nullable``)."""
    path = f"{at}.{key}" if at else key
    if key not in obj:
        if required:
            raise BadReport(path, "missing")
        return None
    value = obj[key]
    if value is None and nullable:
        return None
    test, want = check
    if not test(value):
        raise BadReport(path, f"is {_kind(value)}, expected {want}{' or null' if nullable else ''}")
    return value


def check_report(rep: Any) -> dict[str, Any]:
    """``rep`` when it has every field this script reads, of the type ``kbuild tune`` writes; BadReport otherwise."""
    if not isinstance(rep, dict):
        raise BadReport("the top level", f"is {_kind(rep)}, expected an object")
    _field(rep, "name", "", TEXT, required=False)
    _field(rep, "accepted", "", BOOL)
    _field(rep, "evaluations", "", COUNT)
    _field(rep, "seconds", "", NON_NEGATIVE)
    _field(rep, "movable_instructions", "", COUNT)
    region = _field(rep, "region", "", OBJECT, required=False, nullable=True)
    if region is not None:
        _field(region, "kind", "region", TEXT, required=False)
        _field(region, "start", "region", INDEX, required=False)
        _field(region, "end", "region", INDEX, required=False)
    algorithms = _field(rep, "algorithms", "", OBJECT)
    for name, a in algorithms.items():
        at = f"algorithms.{name}" if _text(name) else "algorithms"
        if not _text(name):
            raise BadReport(at, "an algorithm's name is not a printable string")
        if not isinstance(a, dict):
            raise BadReport(at, f"is {_kind(a)}, expected an object")
        _field(a, "best_ratio", at, POSITIVE)
        _field(a, "evaluations", at, COUNT)
        _field(a, "seconds", at, NON_NEGATIVE)
        _field(a, "confirmed_ratio", at, POSITIVE, required=False, nullable=True)
        _field(a, "confirmed_ci", at, PAIR, required=False, nullable=True)
        _field(a, "confirmed_aa_spread", at, NON_NEGATIVE, required=False, nullable=True)
    decision = _field(rep, "decision", "", OBJECT)
    speedup = _field(decision, "speedup", "decision", POSITIVE, required=bool(rep["accepted"]),
                     nullable=not rep["accepted"])
    if speedup is not None:
        _field(decision, "speedup_ci", "decision", PAIR)
    _field(decision, "aa_spread", "decision", NON_NEGATIVE, required=False, nullable=True)
    if rep["accepted"]:
        _field(decision, "checks", "decision", COUNT)
    return rep


def _shown(path: Path) -> str:
    """A file name for a one-line message: control characters escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(path))


def read_report(path: Path) -> dict[str, Any]:
    """One report, checked (:func:`check_report`); UsageError naming the file (and the key)."""
    where = f"tune_table: {_shown(path)}"
    rep = read_json_file(path, where=where)
    missing = [k for k in REQUIRED if not isinstance(rep, dict) or k not in rep]
    if missing:
        raise UsageError(f"{where}: not a `kbuild tune` report (no key {missing[0]!r})")
    rep.setdefault("name", path.name.removesuffix(".tune.json"))
    try:
        return check_report(rep)
    except BadReport as exc:
        raise UsageError(f"{where}: not a `kbuild tune` report ({exc})") from None


def summarise(reports: list[dict[str, Any]]) -> dict[str, Any]:
    shipped = [r["decision"]["speedup"] if r["accepted"] else 1.0 for r in reports]
    accepted = [r for r in reports if r["accepted"]]
    outcomes = [o for o in map(ppo_outcome, reports) if o is not None]
    return {
        "kernels": len(reports),
        "geomean_speedup": math.exp(sum(math.log(s) for s in shipped) / len(shipped)) if shipped else None,
        "max_speedup": max(shipped, default=None),
        "accepted": [r["name"] for r in accepted],
        "accepted_checks": {r["name"]: r["decision"]["checks"] for r in accepted},
        "evaluations_per_kernel": {r["name"]: r["evaluations"] for r in reports},
        "seconds_per_kernel": {r["name"]: r["seconds"] for r in reports},
        "ppo": {k: outcomes.count(k) for k in ("won", "tied", "lost")},
        "per_kernel": {r["name"]: {
            "shipped_speedup": s, "accepted": r["accepted"], "speedup_ci": r["decision"].get("speedup_ci"),
            "aa_spread": r["decision"].get("aa_spread"), "ppo": ppo_outcome(r),
            "algorithms": {k: {"search_best_ratio": a["best_ratio"], "retimed_ratio": a.get("confirmed_ratio"),
                               "retimed_ci": a.get("confirmed_ci"), "evaluations": a["evaluations"],
                               "seconds": a["seconds"]} for k, a in r["algorithms"].items()},
        } for r, s in zip(reports, shipped)},
    }


def table(reports: list[dict[str, Any]]) -> str:
    head = ("| kernel | region | movable | " + " | ".join(f"{a}: search → re-timed (evals)" for a in ALGOS)
            + " | shipped (95% CI) | A/A | PPO |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in reports:
        cells = []
        for a in ALGOS:
            x = r["algorithms"].get(a)
            cells.append("—" if x is None else
                         f"{_speedup(x['best_ratio'])} → {_speedup(x.get('confirmed_ratio'))} ({x['evaluations']})")
        d = r["decision"]
        if r["accepted"]:
            lo, hi = d["speedup_ci"]
            shipped = f"**{d['speedup']:.3f}× accepted** ({lo:.3f}–{hi:.3f})"
        elif d.get("speedup") is not None:
            lo, hi = d["speedup_ci"]
            shipped = f"baseline kept ({d['speedup']:.3f}, {lo:.3f}–{hi:.3f})"
        else:
            shipped = "baseline kept (no candidate re-timed faster)"
        aa = "—" if d.get("aa_spread") is None else f"{d['aa_spread']:.2%}"
        region = r.get("region") or {}
        where = region.get("kind", "?")
        ppo = ppo_outcome(r) or "—"
        lines.append(f"| {r['name']} | {where} [{region.get('start')}, {region.get('end')}) | "
                     f"{r['movable_instructions']} | " + " | ".join(cells) + f" | {shipped} | {aa} | {ppo} |")
    s = summarise(reports)
    lines.append("")
    lines.append(f"{s['kernels']} kernels: geomean of what ships **{s['geomean_speedup']:.3f}×**, maximum "
                 f"**{s['max_speedup']:.3f}×**; accepted: {', '.join(s['accepted']) or 'none'} (bit-exact input "
                 f"sets each: {', '.join(str(v) for v in s['accepted_checks'].values()) or '—'}); PPO against the "
                 f"best other search: won {s['ppo']['won']}, tied {s['ppo']['tied']}, lost {s['ppo']['lost']} "
                 f"(a difference inside the kernel's A/A spread is a tie).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="a folder of <kernel>.tune.json reports (from `kbuild tune --suite --out`)")
    ap.add_argument("--json", metavar="OUT", help="also write the summary as JSON here")
    args = ap.parse_args(argv)
    paths = sorted(Path(args.folder).glob("*.tune.json"))
    if not paths:
        print(f"tune_table: {args.folder}: no *.tune.json reports", file=sys.stderr)
        return 2
    try:
        reports = [read_report(p) for p in paths]
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    text = table(reports)
    if args.json:
        try:
            write_atomic(args.json, json.dumps(summarise(reports), indent=2) + "\n")
        except OSError as exc:
            print(f"tune_table: --json {_shown(Path(args.json))}: cannot write: {exc.strerror or exc}", file=sys.stderr)
            return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
