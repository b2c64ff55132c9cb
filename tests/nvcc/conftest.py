"""Fixtures of the nvcc launcher tests: the nvcc installed from the package index (kbuild[cuda]), a small CUDA
source and a launcher runner (:mod:`nvcc_helpers`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from nvcc_helpers import KERNEL, Runner

from kbuild.nvcc.toolkit import find_nvcc


@pytest.fixture(scope="session")
def nvcc() -> str:
    found = find_nvcc()
    if found is None:
        pytest.skip("no nvcc from the package index: pip install 'kbuild[cuda]' (scripts/setup-venv installs it)")
    return str(found)


@pytest.fixture
def launcher(tmp_path: Path) -> Runner:
    return Runner(tmp_path / "store", tmp_path / "steps.jsonl")


@pytest.fixture
def cu(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "k.cu").write_text(KERNEL)
    return src
