"""A fuzz of malformed ``kbuild.tile`` programs: each must be one clean error naming the program, never a traceback.

    python benchmarks/tile_fuzz.py [--out FILE]

:data:`FAULTS` holds malformed programs: Python's control flow and numbers on a tile (``if``, ``range``,
``math.exp``, ``**``, ``@``), bad operands (``load(x, other="zero")``, ``10**400``, ``.to(None)``), misused
operations, bad annotations (``Scalar("int77")``), kernels that raise, exit or recurse, parameters whose names
collide with the emitted kernel's, and things that are no kernel at all (``os:getcwd``). Each is written into a
module of its own and run through ``kbuild tile MODULE:FUNCTION`` in this process (:func:`kbuild.cli.main`),
and judged (:func:`judge`): ``clean`` (exit status 2, one ``error:`` line that names the program: its function,
or its module for a fault at import), ``traceback`` (an exception escaped, or a traceback was printed),
``accepted`` (exit status 0: a malformed program went through), or ``unclean`` (anything else).
``tests/tile/test_tile_fuzz.py`` runs every fault, and hypothesis-made programs through the same judge.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import sys
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: The header of every generated module.
HEADER = """\
import math
import os
import sys

from kbuild.tile.lang import (Scalar, Tensor, dequant, exp, extent, load, loop, maximum, mma, rearrange, rsqrt,
                              shared, sqrt, store, zeros)
"""

#: A row-wise kernel with one line (``{body}``) of something else before its store.
ROW = """\
def kern(x: Tensor("fp16", "MN"), w: Tensor("fp16", "N"), y: Tensor("fp16", "MN"), s: Scalar("fp32")):
    a = load(x).to("fp32")
    {body}
    store(y, a)
"""

#: An mma kernel with one line (``{body}``) inside its K loop (run with ``--problem``).
MMA = """\
def kern(a: Tensor("fp16", "MK"), b: Tensor("fp16", "KN"), c: Tensor("fp16", "MN")):
    acc = zeros("MN")
    for k in loop("K"):
        {body}
    store(c, acc)
"""

#: Lines put into :data:`ROW`.
ROW_FAULTS = [
    # Python's control flow and numbers on a traced tile
    "if a: a = a + 1", "while a: break", "a = a if a else a", "assert a", "a = a and a", "a = a or a", "a = not a",
    "for i in range(a): pass", "a = [1, 2][a]", "a = math.exp(a)", "a = math.sqrt(a)", "a = float(a)", "a = int(a)",
    "a = complex(a)", "a = round(a)", "a = a ** 2", "a = 2 ** a", "a = a @ a", "a = a % 2", "a = a // 2",
    "a = a & 1", "a = a | 1", "a = a ^ 1", "a = a << 1", "a = a >> 1", "a = ~a", "a = abs(a)", "a = a > 0",
    "a = a < a", "a = a >= 0", "a = max(a, 0)", "a = sum(a)", "a = len(a)", "a = list(a)", "a[0] = 1",
    "a = a[0]", "a = a[:, None]", "a = a.sum(axis=1)[0]", "a = {a: 1}[a]", "a = a.exp()", "a = a.shape[5]",
    # bad operands
    "a = load(x, other='zero')", "a = load(x, other=None)", "a = load(x, other=10**400)", "a = load(x, other=[0])",
    "a = load(w)", "a = load(a)", "a = load(s)", "a = load('x')", "a = load(x, layout=42)",
    "a = load(x, layout='blocked')", "a = a * 10**400", "a = a + 'x'", "a = a + None", "a = a + [1]",
    "a = a * True", "a = a + 1j", "a = a.to(None)", "a = a.to('int77')", "a = a.to(32)", "a = a.to('fp8')",
    "a = a.sum(axis=2)", "a = a.sum(axis=-1)", "a = a.sum(axis=None)", "a = a.sum(axis='1')", "a = a.sum(axis=1.0)",
    "a = a.sum(axis=True)", "a = a.sum(1)[:, None] + a.sum(0)", "a = a.sum(axis=1).sum(axis=0)",
    "a = a + a.sum(axis=1)", "a = exp(1.0)", "a = exp(s)", "a = exp('a')", "a = sqrt(None)", "a = maximum(1, 2)",
    "a = rearrange(x)", "a = extent('K')", "a = a / extent('Q')", "a = zeros('MK')", "a = zeros('MN', 'int4')",
    "a = a + s * 2", "a = a + (s > 0)",
    # misused operations
    "store(w, a)", "store(s, a)", "store(y, 1.0)", "store(y, None)", "store(a, a)", "store(y, a.sum(axis=0))",
    "store('y', a)", "for k in loop('K'): pass", "for k in loop('M'): pass", "mma(a, a, a)", "a = shared(x)",
    "a = dequant(x, w)", "a = dequant(x, w, group=3)",
    # user code that fails
    "raise RuntimeError('boom')", "raise SystemExit(0)", "sys.exit(0)", "sys.exit('bye')", "raise MemoryError",
    "raise RecursionError", "return kern(x, w, y, s)", "import kbuild_no_such_module", "a = undefined_name",
    "a = 1 / 0", "del a", "exec('1/0')", "a = (lambda: a.foo)()", "raise ValueError('x' * 10000)",
    "raise OSError(2, 'gone', '/no/such/file')",
]

#: Lines put into :data:`MMA`'s loop.
MMA_FAULTS = [
    "mma(shared(a), shared(b), zeros('MN'))", "mma(shared(b), shared(a), acc)", "mma(shared(a), shared(b), acc); "
    "mma(shared(a), shared(b), acc)", "mma(a, b, acc)", "mma(shared(a), shared(b), acc.to('fp16'))",
    "mma(shared(a), shared(b), acc)\n        for j in loop('K'): pass", "acc = acc + 1", "mma(shared(a), acc, acc)",
    "mma(shared(a), shared(b), acc @ acc)", "mma(shared(a), dequant(b, a, group=2**70), acc)",
    "mma(shared(a), shared(b), acc) if acc else None", "mma(shared(c), shared(b), acc)", "store(c, acc)",
]

#: Whole programs: (name, source defining ``kern`` or the object the fault names, the function's name).
WHOLE: list[tuple[str, str, str]] = [
    ("no annotation", "def kern(x, y: Tensor('fp16')):\n    store(y, load(x))\n", "kern"),
    ("string annotation of garbage", "def kern(x: 'Tensor(fp16)', y: Tensor('fp16')):\n    store(y, load(x))\n",
     "kern"),
    ("annotation is a type", "def kern(x: int, y: Tensor('fp16')):\n    store(y, load(x))\n", "kern"),
    ("Tensor('fp8')", "def kern(x: Tensor('fp8'), y: Tensor('fp16')):\n    store(y, load(x))\n", "kern"),
    ("Tensor dims XY", "def kern(x: Tensor('fp16', 'XY'), y: Tensor('fp16')):\n    store(y, load(x))\n", "kern"),
    ("Tensor(None)", "def kern(x: Tensor(None), y: Tensor('fp16')):\n    store(y, load(x))\n", "kern"),
    ("Scalar('int77')", "def kern(x: Tensor('fp16'), y: Tensor('fp16'), s: Scalar('int77')):\n"
     "    store(y, load(x))\n", "kern"),
    ("Scalar(None)", "def kern(x: Tensor('fp16'), y: Tensor('fp16'), s: Scalar(None)):\n    store(y, load(x))\n",
     "kern"),
    ("Scalar(32)", "def kern(x: Tensor('fp16'), y: Tensor('fp16'), s: Scalar(32)):\n    store(y, load(x))\n",
     "kern"),
    ("Tensor('int4', 'MN')", "def kern(x: Tensor('int4', 'MN'), y: Tensor('fp16')):\n    store(y, load(x))\n",
     "kern"),
    ("annotation raises", "def kern(x: Tensor('fp16'), y: 'undefined_thing'):\n    store(y, load(x))\n", "kern"),
    ("*args", "def kern(*xs: Tensor('fp16')):\n    store(xs[1], load(xs[0]))\n", "kern"),
    ("**kw", "def kern(x: Tensor('fp16'), **kw: Tensor('fp16')):\n    store(x, load(x))\n", "kern"),
    ("stores nothing", "def kern(x: Tensor('fp16'), y: Tensor('fp16')):\n    load(x)\n", "kern"),
    ("a generator", "def kern(x: Tensor('fp16'), y: Tensor('fp16')):\n    yield store(y, load(x))\n", "kern"),
    ("async", "async def kern(x: Tensor('fp16'), y: Tensor('fp16')):\n    store(y, load(x))\n", "kern"),
    ("a class", "class kern:\n    def __init__(self, x: Tensor('fp16'), y: Tensor('fp16')):\n"
     "        store(y, load(x))\n", "kern"),
    ("a lambda", "kern = lambda x: store(x, load(x))\n", "kern"),
    ("a number", "kern = 3\n", "kern"),
    ("a builtin", "kern = os.getcwd\n", "kern"),
    ("a partial", "import functools\ndef f(x: Tensor('fp16'), y: Tensor('fp16')):\n    store(y, load(x))\n"
     "kern = functools.partial(f)\n", "kern"),
    ("renamed to <lambda>", "def kern(x: Tensor('fp16'), y: Tensor('fp16')):\n    store(y, load(x))\n"
     "kern.__name__ = '<lambda>'\n", "kern"),
    ("renamed to a keyword", "def kern(x: Tensor('fp16'), y: Tensor('fp16')):\n    store(y, load(x))\n"
     "kern.__name__ = 'class'\n", "kern"),
    ("named gl", "def gl(x: Tensor('fp16'), y: Tensor('fp16')):\n    store(y, load(x))\n", "gl"),
    ("parameter BLOCK_M", "def kern(x: Tensor('fp16'), y: Tensor('fp16'), BLOCK_M: Scalar('i32')):\n"
     "    store(y, load(x))\n", "kern"),
    ("parameter VARIANT", "def kern(x: Tensor('fp16'), y: Tensor('fp16'), VARIANT: Scalar('i32')):\n"
     "    store(y, load(x) * VARIANT)\n", "kern"),
    ("parameter gl", "def kern(x: Tensor('fp16'), y: Tensor('fp16'), gl: Scalar('fp32')):\n"
     "    store(y, load(x) * gl)\n", "kern"),
    ("parameter pid", "def kern(x: Tensor('fp16'), y: Tensor('fp16'), pid: Scalar('fp32')):\n"
     "    store(y, load(x) * pid)\n", "kern"),
    ("parameter v0", "def kern(x: Tensor('fp16'), y: Tensor('fp16'), v0: Scalar('fp32')):\n"
     "    store(y, load(x) * v0)\n", "kern"),
    ("parameter x_ptr", "def kern(x: Tensor('fp16'), y: Tensor('fp16'), x_ptr: Scalar('fp32')):\n"
     "    store(y, load(x) * x_ptr)\n", "kern"),
    ("parameter stride_x", "def kern(x: Tensor('fp16'), y: Tensor('fp16'), stride_x: Scalar('fp32')):\n"
     "    store(y, load(x) * stride_x)\n", "kern"),
    ("parameter rows0", "def kern(x: Tensor('fp16'), y: Tensor('fp16'), rows0: Scalar('fp32')):\n"
     "    store(y, load(x) * rows0)\n", "kern"),
    ("module exits at import", "sys.exit(0)\ndef kern(x: Tensor('fp16'), y: Tensor('fp16')):\n"
     "    store(y, load(x))\n", "kern"),
    ("module raises at import", "raise RuntimeError('import-time boom')\n", "kern"),
    ("module recurses at import", "def f():\n    return f()\nf()\n", "kern"),
    ("module has a syntax error", "def kern(:\n", "kern"),
    ("module imports a missing module", "import kbuild_no_such_module_either\n", "kern"),
    ("no such function", "def other(x: Tensor('fp16'), y: Tensor('fp16')):\n    store(y, load(x))\n", "kern"),
]


#: Well-formed programs near the faults above, which must build (exit status 0): the checks refuse what is
#: wrong, not what merely looks unusual.
EDGES: list[tuple[str, str, str]] = [
    ("a tensor named n_rows", "def kern(x: Tensor('fp16'), n_rows: Tensor('fp16')):\n    store(n_rows, load(x))\n",
     "kern"),
    ("an mma scalar named acc", "def kern(a: Tensor('fp16', 'MK'), b: Tensor('fp16', 'KN'), c: Tensor('fp16', 'MN'), "
     "acc: Scalar('fp32')):\n    t = zeros('MN')\n    for k in loop('K'):\n        mma(shared(a), shared(b), t)\n"
     "    store(c, t * acc)\n", "kern"),
    ("a fill of -inf", "def kern(x: Tensor('fp16'), y: Tensor('fp16')):\n    store(y, load(x, other=-float('inf')))\n",
     "kern"),
    ("negation and a big float", "def kern(x: Tensor('fp16'), y: Tensor('fp16')):\n    store(y, -load(x) * 1e30)\n",
     "kern"),
    ("a string annotation", "def kern(x: 'Tensor(\"fp16\")', y: Tensor('fp16')):\n    store(y, load(x))\n", "kern"),
]


@contextlib.contextmanager
def _module_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="kbuild-tile-fuzz-") as tmp:
        sys.path.insert(0, tmp)
        try:
            yield Path(tmp)
        finally:
            sys.path.remove(tmp)


def _args(source: str) -> list[str]:
    return ["--problem", "256,256,256"] if "loop(" in source else ["--block", "N=64", "--warps", "4"]


def programs() -> list[tuple[str, str, str, list[str]]]:
    """Every fault: (name, module source, function name, extra ``kbuild tile`` arguments)."""
    out = [(f"row: {line}", HEADER + ROW.format(body=line), "kern", ["--block", "N=64", "--warps", "4"])
           for line in ROW_FAULTS]
    out += [(f"mma: {line}", HEADER + MMA.format(body=line), "kern", ["--problem", "256,256,256"])
            for line in MMA_FAULTS]
    out += [(name, HEADER + source, fn, _args(source)) for name, source, fn in WHOLE]
    return out


_counter = iter(range(10**9))


def run_program(source: str, fn: str, extra: list[str], directory: Path) -> dict[str, Any]:
    """Write ``source`` as a module of its own in ``directory`` and run ``kbuild tile MODULE:fn *extra`` in
    this process; the judged outcome (:func:`judge`)."""
    from kbuild.cli import main

    module = f"kbuild_tile_fuzz_{next(_counter)}"
    (directory / f"{module}.py").write_text(source)
    importlib.invalidate_caches()
    out, err = io.StringIO(), io.StringIO()
    escaped: BaseException | None = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: int | None = main(["tile", f"{module}:{fn}", *extra])
        except BaseException as exc:
            escaped, code = exc, None
    sys.modules.pop(module, None)
    return judge(code, err.getvalue(), escaped, names=(fn, module))


def judge(code: int | None, stderr: str, escaped: BaseException | None, *, names: tuple[str, ...]) -> dict[str, Any]:
    """``{"outcome": clean|traceback|accepted|unclean, "exit": ..., "error": first error line, "exception": ...}``."""
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    doc: dict[str, Any] = {"exit": code, "error": errors[0][:300] if errors else None,
                           "exception": type(escaped).__name__ if escaped is not None else None}
    if escaped is not None or "Traceback (most recent call last)" in stderr:
        doc["outcome"] = "traceback"
    elif code == 0:
        doc["outcome"] = "accepted"
    elif code == 2 and len(errors) == 1 and any(n in errors[0] for n in names):
        doc["outcome"] = "clean"
    else:
        doc["outcome"] = "unclean"
    return doc


def fuzz() -> dict[str, Any]:
    """Run every program of :func:`programs` (each must be ``clean``) and of :data:`EDGES` (each must be
    ``accepted``); counts by outcome, and each one that did not end as it must."""
    start = time.monotonic()
    results = []
    edges = []
    with _module_dir() as d:
        for name, source, fn, extra in programs():
            results.append({"program": name, **run_program(source, fn, extra, d)})
        for name, source, fn in EDGES:
            edges.append({"program": name, **run_program(HEADER + source, fn, _args(source), d)})
    outcomes = Counter(r["outcome"] for r in results)
    return {
        "programs": len(results),
        "clean": outcomes["clean"],
        "tracebacks": outcomes["traceback"] + sum(1 for r in edges if r["outcome"] == "traceback"),
        "accepted": outcomes["accepted"],
        "unclean": outcomes["unclean"],
        "by_exception": dict(Counter(r["exception"] for r in results + edges if r["exception"])),
        "edges": len(edges),
        "edges_built": sum(1 for r in edges if r["outcome"] == "accepted"),
        "seconds": round(time.monotonic() - start, 1),
        "not_clean": [r for r in results if r["outcome"] != "clean"]
                     + [r for r in edges if r["outcome"] != "accepted"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args(argv)
    doc = fuzz()
    text = json.dumps(doc, indent=2, ensure_ascii=False)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(textwrap.shorten(json.dumps({k: v for k, v in doc.items() if k != "not_clean"}), 400))
    for r in doc["not_clean"]:
        print(f"  {r['outcome']}: {r['program']}: exit {r['exit']}: {r['exception'] or r['error']}")
    return 0 if doc["clean"] == doc["programs"] and doc["edges_built"] == doc["edges"] else 1


if __name__ == "__main__":
    sys.exit(main())
