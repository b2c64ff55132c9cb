"""The `kbuild tune` results table (markdown) and summary (JSON) from a folder of ``*.tune.json`` reports.

    python benchmarks/tune_table.py benchmarks/results/h200/tune [--json OUT.json]

Per kernel: the search region, the movable instructions, each algorithm's search best and re-timed
speedup with its evaluations, and what ships (the acceptance run's speedup and 95% CI, against its
A/A spread). Below the table: the geometric mean and maximum of what ships (a kept baseline counts
as 1.0×), the accepted schedules' checks, and how PPO fared against the best other search, where a
difference inside the kernel's A/A spread is a tie. Everything is read from the reports; nothing is
typed in.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

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


def ppo_outcome(rep: dict[str, Any]) -> str:
    """PPO against the best other search in one report, by re-timed ratios and the kernel's A/A spread."""
    algos = rep["algorithms"]
    other = min(_score(a) for k, a in algos.items() if k != "ppo")
    return tune_api.ppo_outcome(_score(algos["ppo"]), other, _noise(rep))


def summarise(reports: list[dict[str, Any]]) -> dict[str, Any]:
    shipped = [r["decision"]["speedup"] if r["accepted"] else 1.0 for r in reports]
    accepted = [r for r in reports if r["accepted"]]
    outcomes = [ppo_outcome(r) for r in reports if "ppo" in r["algorithms"] and len(r["algorithms"]) > 1]
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
            "aa_spread": r["decision"].get("aa_spread"), "ppo": ppo_outcome(r) if "ppo" in r["algorithms"] else None,
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
        region = r.get("region", {})
        where = region.get("kind", "?")
        ppo = ppo_outcome(r) if "ppo" in r["algorithms"] else "—"
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
    reports = []
    for p in paths:
        try:
            rep = json.loads(p.read_text())
        except ValueError as exc:
            print(f"tune_table: {p}: not JSON ({exc})", file=sys.stderr)
            return 2
        missing = [k for k in REQUIRED if not isinstance(rep, dict) or k not in rep]
        if missing:
            print(f"tune_table: {p}: not a `kbuild tune` report (no key {missing[0]!r})", file=sys.stderr)
            return 2
        rep.setdefault("name", p.name.removesuffix(".tune.json"))
        reports.append(rep)
    print(table(reports))
    if args.json:
        Path(args.json).write_text(json.dumps(summarise(reports), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
