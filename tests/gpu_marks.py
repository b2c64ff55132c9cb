"""Marks for tests that need a real GPU (imported by name: tests/ is on sys.path through its conftest).

``pytestmark = needs_sm90`` marks a module ``gpu`` and skips it without an sm_90 GPU; on the H200
they run with ``pytest -m gpu`` (benchmarks/gpu_session.sh hooks).
"""

from __future__ import annotations

import pytest


def has_sm90() -> bool:
    try:
        import torch
    except ImportError:
        return False
    # Asking for the capability initialises CUDA in this process; the tests only need the answer.
    return torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)


needs_sm90 = [pytest.mark.gpu, pytest.mark.skipif(not has_sm90(), reason="needs an sm_90 GPU")]
