"""Compile the example project's kernels and print {kernel/target: (baseline key, cubin sha256)}.

Run it here (CPU, Python 3.11) and on the GPU machine (Python 3.12): equal keys must mean equal
bytes, or a cache prewarmed on the GPU machine would ship different code than CI compiles.

    python benchmarks/cross_machine_cubins.py > benchmarks/results/cross_machine_cpu.json
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
try:  # an installed kbuild (kbuild.hooks is mapped from hooks/ only by an install)
    import kbuild.hooks  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT))

from kbuild.build.resolve import resolve, select_targets  # noqa: E402
from kbuild.compile import compile_kernel  # noqa: E402
from kbuild.settings.sources import load_settings  # noqa: E402
from kbuild.toolchain import ptxas_version, triton_version  # noqa: E402


def main() -> None:
    s = load_settings(ROOT / "examples" / "cmake-extension" / "pyproject.toml", environ={})
    out = {}
    for b in resolve(s, s.kernels, select_targets(s, ["sm_80", "sm_90"])):
        ck = compile_kernel(s, b.spec, b.target, fn=b.fn)
        out[f"{b.spec.name}/{b.target.name}"] = {"baseline_key": b.baseline_key.hex, "cubin_sha256": ck.cubin_sha256,
                                                 "cubin_bytes": len(ck.cubin)}
    doc = {"python": platform.python_version(), "triton": triton_version(), "ptxas": ptxas_version(),
           "kernels": out}
    print(json.dumps(doc, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
