"""Shared fixtures. Every test gets its own store directory and Triton cache: nothing reads or
writes the developer's ~/.cache."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "cmake-extension"


@pytest.fixture(autouse=True)
def _isolated_caches(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.mktemp("cache-home")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(home / "triton"))
    for var in ("KBUILD_STORE", "KBUILD_TARGETS", "KBUILD_TUNE", "KBUILD_STORE_SECRET", "KBUILD_BUDGET_EVALUATIONS",
                "KBUILD_BUDGET_SECONDS", "KBUILD_SEED", "KBUILD_ALGORITHM"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def example_project(tmp_path: Path) -> Path:
    """A private copy of the example project."""
    dest = tmp_path / "project"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("__pycache__", "build", "dist"))
    return dest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A hostile case's mark goes into its reports (``user_properties``), so that ``benchmarks/reliability.py``
    tallies it also when pytest-xdist workers run the cases (the mark itself stays in the worker)."""
    for item in items:
        mark = item.get_closest_marker("hostile")
        if mark is not None:
            item.user_properties.append(("hostile", (mark.kwargs.get("fault"), mark.kwargs.get("outcome"))))
