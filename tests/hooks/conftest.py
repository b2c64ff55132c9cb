"""Fixtures for the build-hook tests: a session store filled once with both examples' baselines,
so that each wheel build in these tests is an all-hit build."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hooks_helpers import CMAKE_EXAMPLE, SETUPTOOLS_EXAMPLE, build_env, kbuild_cli


def _installed_cmake_package_is_current() -> None:
    """The builds find kbuild's CMake package where pip installed it; in a development (editable)
    install that copy does not follow edits of cmake/KBuildConfig.cmake, so say so plainly."""
    import kbuild.cmake

    source = Path(__file__).resolve().parents[2] / "cmake" / "KBuildConfig.cmake"
    for base in kbuild.cmake.__path__:
        installed = Path(base) / "KBuild" / "KBuildConfig.cmake"
        if installed.is_file() and installed.read_bytes() != source.read_bytes():
            pytest.fail(f"{installed} is older than {source}; reinstall kbuild: "
                        "pip install --no-deps --no-build-isolation -e .", pytrace=False)


@pytest.fixture(scope="session")
def session_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding the baselines of both examples (compiled once per session)."""
    _installed_cmake_package_is_current()
    store = tmp_path_factory.mktemp("hooks-store")
    env = build_env(store, XDG_CACHE_HOME=str(tmp_path_factory.mktemp("xdg")))
    for example in (CMAKE_EXAMPLE, SETUPTOOLS_EXAMPLE):
        proc = kbuild_cli("compile", "--config", str(example / "pyproject.toml"), "--json", "--no-progress", env=env)
        assert proc.returncode == 0, proc.stderr
    return store


@pytest.fixture
def store(session_store: Path, tmp_path: Path) -> Path:
    """A private copy of the session store (a test may write to it)."""
    dest = tmp_path / "store"
    shutil.copytree(session_store, dest)
    return dest
