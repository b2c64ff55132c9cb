"""Real cubins for the measurement tests, compiled once per session (no GPU needed)."""

from __future__ import annotations

import pytest

from kbuild.bench.spec import compile_spec, load_spec

SOFTMAX = "kbuild.bench.kernels.softmax:softmax"


@pytest.fixture(scope="session")
def cubins() -> dict[int, bytes]:
    spec = load_spec(SOFTMAX, small=True)
    return {arch: compile_spec(spec, spec.configs[0], arch).kernel for arch in (80, 90)}
