"""A test file for ``kbuild record -- pytest -n 2 ...`` in the tests (copied into a temporary directory and run
there): examples/jit-package's kernels called from six tests that pytest-xdist spreads over its workers."""

import pytest
from workload_jit import main


@pytest.mark.parametrize("rows", [16, 32, 48, 64])
def test_softmax(rows):
    main([f"softmax:{rows}"])


@pytest.mark.parametrize("n", [128, 256])
def test_matmul(n):
    main([f"matmul:{n}"])
