"""The CPU fuzz gate of the SASS engine on every fixture cubin, recorded as one JSON document.

    python benchmarks/sass_fuzz_cpu.py [--out benchmarks/results/sass_fuzz_cpu.json]

Runs ``kbuild sass fuzz tests/fixtures/sass/<k>.cubin --sequences 1000 --max-depth 64 --seed 1 --json``
for each fixture (13 today) and writes ``{"command": ..., "kernels": {<k>: <fuzz result>}}``. Every
sequence is written, checked by the independent verifier and re-decoded by nvdisasm; the exit status is
0 only when every fixture has 0 mismatches and 0 verifier rejections. The run is deterministic: the same
code gives the same move counts, so a refactor that claims no behaviour change can be checked against
the committed file.

``--kinds moves,far,yield,reuse,stall`` (issue 15) mixes the far moves and control-code edits in (each step a
kind drawn uniformly; ``kbuild sass fuzz --kinds``), and records the edit counts per kind; the default is the
one-slot moves of the committed file.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "sass"
COMMAND = "kbuild sass fuzz tests/fixtures/sass/<k>.cubin --sequences 1000 --max-depth 64 --seed 1 --json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "sass_fuzz_cpu.json")
    ap.add_argument("--kinds", default="", help="edit kinds to mix in (moves,far,yield,reuse,stall)")
    ap.add_argument("--sequences", type=int, default=1000)
    args = ap.parse_args()
    extra = ["--kinds", args.kinds] if args.kinds else []
    from kbuild.cli import main as kbuild

    kernels = {}
    ok = True
    for path in sorted(FIXTURES.glob("*.cubin")):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = kbuild(["sass", "fuzz", str(path), "--sequences", str(args.sequences), "--max-depth", "64",
                         "--seed", "1", "--json", *extra])
        res = json.loads(buf.getvalue())
        res.pop("examples", None)
        kernels[path.stem] = res
        ok = ok and rc == 0
        print(f"{path.stem:20s} verified {res['verified']:4d}  mismatches {res['mismatches']}  "
              f"rejections {res['verifier_rejections']}  moves {res['moves']}  {res.get('kinds', '')} "
              f"({res['seconds']} s)",
              file=sys.stderr)
    command = COMMAND.replace("1000", str(args.sequences)) + (f" --kinds {args.kinds}" if args.kinds else "")
    doc = {"command": command, "script": "python benchmarks/sass_fuzz_cpu.py", "kernels": kernels}
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, args.out)
    print("PASS" if ok else "FAIL", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
