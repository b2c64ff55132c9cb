"""The Llama-shape workload of ``examples/liger`` (``examples/liger/workload.py``), for the tests that record it.

``python workload_liger.py [--cuda] [DTYPE...]`` runs that file; ``import workload_liger`` gives its ``main``.
"""

import importlib.util
import runpy
import sys
from pathlib import Path

WORKLOAD = Path(__file__).resolve().parents[2] / "examples" / "liger" / "workload.py"

if __name__ == "__main__":
    sys.argv[0] = str(WORKLOAD)
    runpy.run_path(str(WORKLOAD), run_name="__main__")
else:
    _spec = importlib.util.spec_from_file_location("kbx_liger_workload", WORKLOAD)
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
    main = _module.main
