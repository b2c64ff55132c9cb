"""kbuild's own wheel: one import package, the CMake package inside it, nothing at top level."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True, text=True)
    (whl,) = out.glob("kbuild-*.whl")
    return whl


def test_wheel_has_only_the_kbuild_package(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"kbuild", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}, tops
    for sub in ("hooks", "cache", "templates"):
        assert f"kbuild/{sub}/__init__.py" in names
    assert "kbuild/cmake/KBuild/KBuildConfig.cmake" in names
    assert "kbuild/cmake/KBuild/KBuildConfigVersion.cmake" in names
    assert "kbuild/schema/kbuild.schema.json" in names
    assert wheel.name.endswith("-py3-none-any.whl")
    assert not any("__pycache__" in n for n in names)
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "[cmake.prefix]" in entry_points and "kbuild = kbuild.cmake" in entry_points
    assert "kbuild = kbuild.cli:main" in entry_points


def test_editable_install_maps_the_subpackages():
    # The test environment is an editable install (scripts/setup-venv): the mapped folders import as kbuild.*.
    import kbuild.cache
    import kbuild.hooks
    import kbuild.templates

    assert Path(kbuild.cache.__file__).parent == ROOT / "cache"
    assert Path(kbuild.hooks.__file__).parent == ROOT / "hooks"
    assert Path(kbuild.templates.__file__).parent == ROOT / "templates"
    # Note: scikit-build-core's editable .pth also puts the checkout root on sys.path, so in a
    # *development* install `import cache` finds the source folder; the wheel test above is the one
    # that guarantees nothing top-level reaches site-packages.
