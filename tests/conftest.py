"""Shared fixtures. Every test gets its own store directory and Triton cache: nothing reads or
writes the developer's ~/.cache. Every test starts from the settings model's defaults: none of the ``KBUILD_*``
variables the model knows is set (the shell's are put back afterwards), and a test sets settings through
``kbuild_env`` (:class:`kbuild.settings.variables.Override`), never ``os.environ`` by hand."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbuild.settings.variables import Override

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "cmake-extension"


@pytest.fixture(autouse=True)
def _isolated_caches(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.mktemp("cache-home")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(home / "triton"))


@pytest.fixture(autouse=True, scope="session")
def _no_kbuild_variables() -> Iterator[None]:
    """The shell's ``KBUILD_*`` variables unset for the whole run too, so that a fixture made once for many tests
    (a wheel built by a session fixture) starts from the model's defaults as well."""
    with Override(clear=True):
        yield


@pytest.fixture(autouse=True)
def kbuild_env() -> Iterator[Override]:
    """Every ``KBUILD_*`` variable of the settings model unset for the test (the list comes from the model:
    :func:`kbuild.settings.variables.variables`); ``kbuild_env.set(store=path, tune="off")`` sets settings through
    their variables, which the processes the test starts see too. All put back afterwards."""
    with Override(clear=True) as env:
        yield env


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
