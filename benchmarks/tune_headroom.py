"""How much room the SASS engine leaves the tuner, per suite kernel (CPU only; no GPU needed).

For each sm_90 suite kernel (the configuration ``kbuild bench`` kept, from ``--configs-from``, or
each spec's first) it reports: instructions, the search region the tuner uses (loop or block),
movable instructions there, the legal single moves from the ptxas order, and, for every adjacent
pair in the region that cannot swap, the engine's reason, grouped. This is the denominator of any
speedup: a move that is never legal is never searched.

    python benchmarks/tune_headroom.py [--configs-from bench.json] [--out benchmarks/results/tune_headroom.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def reason_class(reason: str) -> str:
    """Group the engine's reasons: drop register names, slots and numbers."""
    r = re.sub(r"\bU?[RP]\d+\b|\bUP\d\b|\b\d+\b|0x[0-9a-f]+", "#", reason)
    return r.split(":")[0] + (":" + r.split(":")[1].split("(")[0] if ":" in r else "")


def analyse(name: str, cubin: bytes, symbol: str) -> dict[str, Any]:
    from kbuild.sass.schedule import Schedule
    from kbuild.tune.api import describe_region
    from kbuild.tune.env import hot_region

    sched = Schedule.from_cubin(cubin, symbol)
    an = sched.analysis
    region = hot_region(sched)
    start, end = region
    pinned = an.pinned
    legal = sched.legal_moves()
    reasons: collections.Counter[str] = collections.Counter()
    pin_reasons: collections.Counter[str] = collections.Counter()
    for i in range(start, end):
        if an.sems[i].pinned:
            pin_reasons[reason_class(an.sems[i].pinned)] += 1
    for s in range(start, end - 1):
        why = sched.why_illegal(s, 1)
        reasons["legal" if why is None else reason_class(why)] += 1
    opcodes = collections.Counter(an.instructions[i].base for i in range(start, end))
    return {
        "kernel": name, "instructions": an.n, "pinned_fraction_kernel": round(float(pinned.mean()), 4),
        "loops": an.loops(), "region": describe_region(sched, region),
        "movable_in_region": int((~pinned[start:end]).sum()),
        "legal_moves_at_start": int(legal[start:end].sum()),
        "adjacent_pairs": end - start - 1,
        "adjacent_pairs_by_reason": dict(reasons.most_common()),
        "pinned_in_region_by_reason": dict(pin_reasons.most_common()),
        "region_opcodes": dict(opcodes.most_common(12)),
        "variable_latency_in_region": int(sum(an.sems[i].variable for i in range(start, end))),
    }


def main() -> int:
    from kbuild.bench.kernels import SUITE
    from kbuild.bench.spec import compile_spec, load_spec
    from kbuild.commands.tune import autotuned_configs

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--configs-from")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/tune_headroom.json")
    args = p.parse_args()
    chosen = autotuned_configs(args.configs_from) if args.configs_from else {}
    rows = []
    for name, ref in SUITE.items():
        spec = load_spec(ref)
        labels = [c.label() for c in spec.configs]
        idx = labels.index(chosen.get(name, labels[0]))
        compiled = compile_spec(spec, spec.configs[idx], 90)
        row = analyse(name, compiled.asm["cubin"], compiled.metadata.name)
        row["config"] = labels[idx]
        rows.append(row)
        r = row["region"]
        top = ", ".join(f"{k} {v}" for k, v in list(row["adjacent_pairs_by_reason"].items())[:4])
        print(f"{name:<30} {r['kind']:<5} [{r['start']},{r['end']}) movable {row['movable_in_region']:>4} "
              f"legal {row['legal_moves_at_start']:>4}/{2 * row['adjacent_pairs']:<5} {top}", flush=True)
    doc = {"command": "python " + " ".join(sys.argv), "configs_from": args.configs_from, "kernels": rows}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
