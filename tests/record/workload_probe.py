"""A workload for ``kbuild record`` in the tests: ``kbx_probe`` (tests/record/probe), imported as on a GPU machine.

``python workload_probe.py [--as-gpu]``: with ``--as-gpu``, ``torch.cuda.is_available()`` answers True before
``kbx_probe`` is imported, as it does on the GPU machine, so its module folds ``"tf32"`` and picks the fast
softplus (the calls themselves run on CPU tensors, recorded by ``--mode cpu``, never launched).
"""

import sys
from pathlib import Path

import torch

if "--as-gpu" in sys.argv[1:]:
    torch.cuda.is_available = lambda: True

sys.path.insert(0, str(Path(__file__).resolve().parent / "probe"))

import kbx_probe

kbx_probe.dense_softplus(torch.randn(64, 32), torch.randn(32, 32))
