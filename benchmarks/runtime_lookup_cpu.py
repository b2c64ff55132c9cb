"""The run time's shipped-kernel lookup and index load on a large real index, on the CPU (no GPU needed).

    python benchmarks/runtime_lookup_cpu.py --wheel .whl-s/liger-prebuilt/kbx_liger-0.1.0-py3-none-any.whl \\
        --recording examples/liger/recordings/liger-tests.h100.json --out benchmarks/results/runtime_lookup_cpu.json

The wheel is examples/liger built on a CPU from the recording of Liger-Kernel's own tests (gpu_session.md says how;
1,488 entries for sm_90). For each recorded specialisation (up to ``--per-kernel`` per kernel) the call's key is
looked up among its function's entries as the run time does inside a kernel's first call
(:func:`kbuild.runtime.lookup.nearest`), and, as the baseline in the same run, as the lookup did before it computed
the call's key once per (ptxas, declaration of the 1s, distribution): a key and its digest per entry, in order
(``per_entry``, reproduced here). Both must find the same entry. Also: the whole recording's coverage check
(:func:`kbuild.record.covers.recording_coverage`, what ``kbuild inspect --recording`` spends) with each lookup, the
index's bytes written compact and with the two-space indent it had, and the time to parse it (``parse_index``, what
importing the package pays). Raw samples in the JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any


def per_entry(candidates: Any, call: Any, *, explain: bool, distribution: Any) -> Any:
    """The lookup before the memo (the baseline): the call's key and digest computed for every entry."""
    for shipped in candidates:
        entry = shipped.entry
        mine = call.key(ptxas_version=entry["key_components"]["compiler"]["ptxas"], declared=entry.get("signature"),
                        distribution=distribution(entry))
        if mine.hex == shipped.key:
            return shipped, None
    return None, None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, required=True)
    parser.add_argument("--recording", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--per-kernel", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from kbuild.record.covers import recording_coverage
    from kbuild.record.format import call_specialization, load
    from kbuild.runtime import lookup
    from kbuild.runtime.index import index_bytes, parse_index

    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(args.wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith("_kbuild/index.json"))
        raw = zf.read(name)
        data_dir = Path(tmp)
        parse_s = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            index = parse_index(raw, data_dir=data_dir, where=name)
            parse_s.append(time.perf_counter() - t)
        doc = json.loads(raw)
        sizes = {"as_shipped": len(raw), "compact": len(index_bytes(doc)),
                 "indent_2": len((json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=True) + "\n").encode())}
        rec = load(str(args.recording))
        by_function = index.by_function()
        rows: dict[str, dict[str, Any]] = {}
        for kernel in rec.kernels.values():
            cands = by_function.get(kernel.function, [])
            specs = [s for s in kernel.specializations.values() if not s.unsupported][:args.per_kernel]
            if not cands or not specs:
                continue
            row = rows.setdefault(kernel.function, {"entries": len(cands), "memo_ms": [], "per_entry_ms": []})

            def dist(_entry: Any, k: Any = kernel) -> Any:  # the recording's distribution, as inspect passes it
                return k.distribution

            for spec in specs:
                call = call_specialization(rec, kernel, spec)
                t = time.perf_counter()
                found, diffs = lookup.nearest(cands, call, distribution=dist)
                row["memo_ms"].append((time.perf_counter() - t) * 1e3)
                t = time.perf_counter()
                before, _ = per_entry(cands, call, explain=False, distribution=dist)
                row["per_entry_ms"].append((time.perf_counter() - t) * 1e3)
                assert found is before and not diffs, (kernel.function, spec.id)
        coverage: dict[str, list[float]] = {"memo_s": [], "per_entry_s": []}
        for _ in range(args.repeats):
            for label, search in (("memo_s", lookup._search), ("per_entry_s", per_entry)):
                original = lookup._search
                lookup._search = search  # type: ignore[assignment]
                try:
                    t = time.perf_counter()
                    answered = recording_coverage([index], rec)["answered"]
                    coverage[label].append(time.perf_counter() - t)
                finally:
                    lookup._search = original  # type: ignore[assignment]
    summary = {f: {"entries": r["entries"], "calls": len(r["memo_ms"]),
                   "memo_ms_median": statistics.median(r["memo_ms"]),
                   "per_entry_ms_median": statistics.median(r["per_entry_ms"])} for f, r in rows.items()}
    out = {"machine": "CPU (2 shared cores; no GPU needed)", "command": " ".join(["python", *sys.argv]),
           "date": time.strftime("%Y-%m-%d"), "wheel": args.wheel.name, "index_entries": len(index.entries),
           "index_bytes": sizes, "parse_index_s": parse_s, "lookups": rows, "summary": summary,
           "recording_coverage": {**coverage, "answered": answered}}
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"index: {len(index.entries)} entries, {sizes['compact'] / 1e6:.1f} MB compact "
          f"({sizes['indent_2'] / 1e6:.1f} MB indented), parse {statistics.median(parse_s) * 1e3:.0f} ms")
    for f, r in sorted(summary.items(), key=lambda kv: -kv[1]["entries"])[:8]:
        print(f"  {f.split(':')[-1]:<40} {r['entries']:>4} entries: hit {r['memo_ms_median']:.3f} ms "
              f"(per entry {r['per_entry_ms_median']:.3f} ms)")
    print(f"recording coverage ({answered} answered): {statistics.median(coverage['memo_s']):.2f} s "
          f"(per entry {statistics.median(coverage['per_entry_s']):.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
