"""A shipped kernel's first call through the direct path, in this fresh process, on the CPU (stand-ins, labelled).

Run by ``tests/runtime/test_runtime_specialize.py`` and ``benchmarks/runtime_first_call_cpu.py``:

    python tests/runtime/direct_first_call_probe.py DATA_DIR [--specialize kbuild|triton]

``DATA_DIR`` holds examples/jit-package's package data with an sm_90 softmax (``write_package_data``). The
stand-ins of ``runtime_helpers.direct_stand_ins`` replace torch's CUDA queries, libcuda and Triton's driver, so
nothing runs on a GPU: the time is the host side of the first call (binding, specialisation, the shipped-kernel
lookup, the module load and launch calls into the stand-in). ``--specialize triton`` makes the direct path
specialise with Triton's own ``native_specialize_impl`` (what it did before ``kbuild.runtime.specialize``).
Prints one JSON object; ``gluon_imported_after`` is after the first call. Since issue 34 the second call is Triton's
own ``run``, whose specialiser imports Gluon once (``gluon_imported_after_second_call``, ``second_call_s``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "examples" / "jit-package")]
GLUON = "triton.experimental.gluon"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--specialize", choices=["kbuild", "triton"], default="kbuild")
    parser.add_argument("--no-preload", action="store_true",
                        help="enable() imports nothing for the first call (as before it did): the first call does")
    parser.add_argument("--later", type=int, default=0,
                        help="then time this many later calls in chunks of 100 (the steady state beside)")
    args = parser.parse_args()
    started = time.perf_counter()
    import torch
    from runtime_helpers import direct_stand_ins

    import kbuild.runtime
    from kbuild.runtime import specialize

    if args.specialize == "triton":
        specialize.checked = lambda: False  # type: ignore[assignment]
    if args.no_preload:
        from kbuild.runtime import install

        install._preload = lambda: None  # type: ignore[attr-defined]
    import kbx_jit.kernels as kernels

    imports_s = time.perf_counter() - started
    rows, cols = 64, 1024
    x = torch.empty(rows * cols, dtype=torch.float16).view(rows, cols)
    out = torch.empty_like(x)
    gluon_before = any(m.startswith(GLUON) for m in sys.modules)
    with direct_stand_ins() as fake:
        assert kbuild.runtime.enable("kbx_jit", data_dir=args.data_dir)
        modules = set(sys.modules)
        t0 = time.perf_counter()
        kernels.softmax[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK=1024, num_warps=4, num_stages=3)
        first_s = time.perf_counter() - t0
        gluon_after_first = any(m.startswith(GLUON) for m in sys.modules)
        imported_by_first = sorted(set(sys.modules) - modules)
        t1 = time.perf_counter()
        kernels.softmax[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK=1024, num_warps=4, num_stages=3)
        second_s = time.perf_counter() - t1
        later_us = []
        for _ in range(args.later // 100):
            t2 = time.perf_counter()
            for _ in range(100):
                kernels.softmax[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK=1024, num_warps=4,
                                         num_stages=3)
            later_us.append((time.perf_counter() - t2) * 1e4)  # µs per call
    print(json.dumps({
        "preload": not args.no_preload, "later_call_us": later_us,
        "specialize": args.specialize, "imports_s": imports_s, "first_call_s": first_s, "second_call_s": second_s,
        "gluon_imported_before": gluon_before,
        "gluon_imported_after": gluon_after_first,
        "imported_by_first_call": imported_by_first,
        "gluon_imported_after_second_call": any(m.startswith(GLUON) for m in sys.modules),
        "modules_loaded": len(fake.loaded), "launches": len(fake.launches),
        "stages": [e.stage for e in kbuild.runtime.events()],
    }))


if __name__ == "__main__":
    main()
