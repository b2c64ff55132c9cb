"""PEP 517 backend: ``build-backend = "kbuild.hooks.backend"``.

An existing project adopts kbuild by changing its ``build-backend`` to this module and adding a
``[tool.kbuild]`` table. The backend wraps the project's real backend:

* **scikit-build-core** when the project has ``[tool.scikit-build]`` or a ``CMakeLists.txt``;
* **setuptools** (``setuptools.build_meta``) otherwise.

For a wheel it first runs the kernel pipeline (compile → key → store lookup → tune on a miss
where possible), prints one line per kernel × target that ships untuned, and fails early under
``tune = "require"``, ``--locked`` or ``--strict``. It writes the resulting manifest to a temporary
file, with the C sources rendered, and hands over: under scikit-build-core they reach
``kbuild_add_kernels`` as ``-DKBUILD_MANIFEST=... -DKBUILD_PRERENDERED=...`` (plus the dependency
list and Triton's include directory), so the CMake build copies them and runs no Python again;
under setuptools the plugin (:mod:`kbuild.hooks.setuptools_plugin`) picks it
up in-process.

``ship = "package-data"`` (packages that run their kernels through Triton's JIT): the backend also writes the
package data (:func:`kbuild.build.package_data.write_package_data`: ``_kbuild/index.json``, the cubins and the
enabling ``__init__.py``) into its temporary directory, and the plugin's ``build_py`` copies it into setuptools'
``build_lib``, so the wheel ships ``<package>/_kbuild/`` and ``.dist-info/kbuild.json`` while the project's
source tree gets nothing. (scikit-build-core projects cannot ship package data yet: an error says so.)

Options: every ``[tool.kbuild]`` setting can also be given as a config setting ``kbuild.<key>``
(``pip wheel -C kbuild.locked=true -C kbuild.targets=sm_90``), which the environment
(``KBUILD_LOCKED=1``) overrides in turn (:mod:`kbuild.settings.sources` reads them all). A target list given
this way builds part of the project: under ``locked`` the pins of other targets are not stale.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

# Only the standard library at import time: frontends import this module for every hook (kbuild.settings,
# read in the hooks, imports nothing else either).
if TYPE_CHECKING:
    from kbuild.build.kernel_build import KernelBuild
    from kbuild.build.recorded import RecordingReport
    from kbuild.settings.model import Settings

ConfigSettings = Mapping[str, Any] | None

#: The real backends and what to ask for when they are not installed yet.
_SKBUILD = ("scikit_build_core.build", "scikit-build-core>=1.0")
_SETUPTOOLS = ("setuptools.build_meta", "setuptools>=64")


def _project() -> dict[str, Any]:
    """./pyproject.toml through kbuild's one reader (:func:`kbuild.settings.sources.read_pyproject`); empty without one."""
    from kbuild.settings.sources import read_pyproject

    path = Path("pyproject.toml")
    return read_pyproject(path) if path.is_file() else {}


def _tool(project: Mapping[str, Any]) -> Mapping[str, Any]:
    tool = project.get("tool", {})
    return tool if isinstance(tool, dict) else {}


def _backend_spec(project: Mapping[str, Any] | None = None) -> tuple[str, str]:
    if "scikit-build" in _tool(_project() if project is None else project) or Path("CMakeLists.txt").is_file():
        return _SKBUILD
    return _SETUPTOOLS


def _backend(project: Mapping[str, Any] | None = None) -> ModuleType:
    name, _ = _backend_spec(project)
    return importlib.import_module(name)


def _theirs(config_settings: ConfigSettings) -> dict[str, Any] | None:
    """The config settings without kbuild's own ``kbuild.*`` keys (the real backend rejects unknown ones)."""
    if config_settings is None:
        return None
    return {k: v for k, v in config_settings.items() if not k.startswith("kbuild.")}


def _say(message: str) -> None:
    """Build output: frontends show the backend's stderr."""
    print(message, file=sys.stderr, flush=True)


def _debug() -> bool:
    """``KBUILD_DEBUG``: tracebacks instead of one error line. A bad value is itself the error being reported."""
    from kbuild.errors import ConfigError
    from kbuild.settings.variables import env_setting

    try:
        return bool(env_setting("debug"))
    except ConfigError:
        return False


@contextlib.contextmanager
def _reported() -> Iterator[None]:
    """kbuild's errors as one ``error: ...`` line and the error's exit status (a traceback under KBUILD_DEBUG)."""
    from kbuild.errors import KBuildError

    try:
        yield
    except KBuildError as exc:
        if _debug():
            raise
        _say(f"error: {exc}")
        raise SystemExit(exc.exit_code) from None


def plan(config_settings: ConfigSettings, out_dir: Path, *, project: Mapping[str, Any] | None = None) -> Path | None:
    """Plan the build of ./pyproject.toml (:func:`kbuild.build.plan.plan`) and write its files into ``out_dir``:
    the manifest, the C sources rendered as ``kbuild_add_kernels`` would with its defaults, the kernels' source
    files (``depends.txt``) and Triton's include directory (``include_dir.txt``).

    Returns the manifest's path, or None when the project has no ``[tool.kbuild]`` table or declares CUDA C++
    kernels only (``[tool.kbuild.cuda]``: kbuild-nvcc compiles those; :func:`_ship_cuda` lists them). ``project``: the
    file, already read. Raises the pipeline's errors (bad input, ``require``, ``locked``, ``strict``).
    """
    project = _project() if project is None else project
    if "kbuild" not in _tool(project):
        _say("kbuild: no [tool.kbuild] table in pyproject.toml; building without kernels")
        return None
    from kbuild.build import plan as planning
    from kbuild.build.manifest import MANIFEST_NAME
    from kbuild.emit import cuda_include_dir, kernel_sources, write_files
    from kbuild.settings.sources import load_settings

    settings = load_settings("pyproject.toml", config_settings=config_settings, document=project)
    if settings.ship == "package-data" and _backend_spec(project) == _SKBUILD:
        from kbuild.errors import UsageError

        raise UsageError(f'{settings.config_file}: [tool.kbuild] ship = "package-data": the backend writes package '
                         "data through setuptools only, and this project builds with scikit-build-core (CMake); "
                         'ship = "extension" there, or run kbuild package-data into the built tree')
    if not settings.kernels and settings.cuda.kernels:  # CUDA C++ only: nothing to emit, kbuild-nvcc compiles them
        _say(f"kbuild: no Triton kernels; {len(settings.cuda.kernels)} CUDA C++ kernel(s) through kbuild-nvcc")
        return None
    part = list(settings.parsed_targets) if (config_settings or {}).get("kbuild.targets") else None
    result = planning.plan(settings, targets=part)
    tuned = sum(1 for b in result.builds if b.improved)
    _say(f"kbuild: {len(result.builds)} kernel × target ({tuned} tuned) from store {settings.store_path}"
         + (" (locked)" if result.locked else ""))
    for line in result.status_lines():
        _say(line)
    # The sources rendered now, as kbuild_add_kernels would with its default PREFIX and BASENAME: an all-hit
    # build then runs no Python under CMake. (Other options re-emit from the manifest.)
    files = result.files()
    files["depends.txt"] = "".join(f"{p}\n" for p in kernel_sources(settings)).encode()
    files["include_dir.txt"] = f"{cuda_include_dir()}\n".encode()
    write_files(out_dir, files, what=f"kbuild's build directory {out_dir}")
    if settings.ship == "package-data":
        _stage_package_data(settings, result.builds, out_dir, recordings=result.recordings)
    return out_dir / MANIFEST_NAME


#: Where :func:`plan` stages the package data: ``<out_dir>/package-data/<package>/_kbuild/``.
PACKAGE_DATA_DIR = "package-data"


def _stage_package_data(settings: Settings, builds: list[KernelBuild], out_dir: Path, *,
                        recordings: RecordingReport | None = None) -> Path:
    """Write ``<out_dir>/package-data/<package>/_kbuild/`` for ``builds``; the ``<package>`` folder. With
    ``recordings``, say what of them the package data answers."""
    from kbuild.build.package_data import infer_package, write_package_data
    from kbuild.build.recorded import coverage_lines

    package = infer_package(settings, builds)
    data = write_package_data(settings, builds, out_dir / PACKAGE_DATA_DIR / package, package=package)
    loud = data.nothing_ships(settings)
    if loud:
        _say(f"warning: {loud}")
    shipped = sum(1 for e in data.index["entries"].values() if e["tuned"])
    _say(f"kbuild: package data for {package}: {len(data.index['entries'])} kernel × target "
         f"({shipped} tuned) in {package}/{data.data_dir.name}/")
    for line in coverage_lines(recordings, data.index, data.data_dir) if recordings is not None else []:
        _say(f"kbuild: recordings: {line}")
    return data.data_dir.parent


def staged_package_data(manifest: Path) -> Path | None:
    """The ``<package>`` folder :func:`plan` staged next to ``manifest``, or None when it staged none."""
    base = manifest.parent / PACKAGE_DATA_DIR
    found = sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    return found[0] if found else None


#: Where kbuild-nvcc's records go under a scikit-build-core build directory the build names (``build-dir``).
NVCC_RECORDS_DIR = "kbuild-nvcc-records"


def _skbuild_records_dir(config_settings: ConfigSettings, project: Mapping[str, Any], tmp: Path) -> Path:
    """Where kbuild-nvcc writes its records during a scikit-build-core build: inside the build directory when the
    build names one without placeholders (``-C build-dir=DIR`` or ``[tool.scikit-build] build-dir``), which later
    builds reuse, so that units ninja finds up to date keep their records; else in ``tmp`` (scikit-build-core's own
    build directory is then a new temporary one, and every unit compiles)."""
    given = (config_settings or {}).get("build-dir")
    if not isinstance(given, str):
        tool = _tool(project).get("scikit-build")
        given = tool.get("build-dir") if isinstance(tool, dict) else None
    if isinstance(given, str) and given and "{" not in given:
        return (Path(given) / NVCC_RECORDS_DIR).resolve()
    return tmp / NVCC_RECORDS_DIR


def _ship_cuda(config_settings: ConfigSettings, project: Mapping[str, Any], records: Path, wheel: Path) -> None:
    """After a scikit-build-core wheel is built: the project's declared CUDA C++ kernels (kbuild-nvcc's records)
    into the wheel's ``.dist-info/kbuild.json`` (:func:`kbuild.build.manifest.write_wheel_manifest`); the manifest
    ``kbuild_add_kernels`` installed keeps its Triton entries, a wheel without one gets one. Nothing to do for a
    project that declares none."""
    from kbuild.build.manifest import (
        build_manifest,
        declared_cuda_entries,
        wheel_manifest,
        with_cuda,
        write_wheel_manifest,
    )
    from kbuild.settings.sources import load_settings

    settings = load_settings("pyproject.toml", config_settings=config_settings, document=project)
    if not settings.cuda.kernels:
        return
    entries, lines = declared_cuda_entries(settings, records)
    for line in lines:
        _say(line)
    if not entries:
        return
    manifest = wheel_manifest(wheel, missing_ok=True)
    if manifest is None:  # the project's CMake installs none (no kbuild_add_kernels)
        manifest = build_manifest([], tune=settings.tune)
    write_wheel_manifest(wheel, with_cuda(manifest, entries))
    _say(f"kbuild: {len(entries)} CUDA kernel × target in {wheel.name}'s manifest")


def _require_kernels_in(wheel: Path, planned: Path) -> None:
    """After a scikit-build-core build of a project that declares Triton kernels (``ship = "extension"``): the
    wheel must carry them (``kbuild_add_kernels`` installs the manifest beside the extension). A CMakeLists.txt
    that never calls it gives a wheel without a single kernel: the wheel is removed and the build fails, naming
    the call and the setting."""
    from kbuild.build.manifest import wheel_manifest
    from kbuild.errors import UsageError

    inside = wheel_manifest(wheel, missing_ok=True)
    if inside is not None and inside.get("kernels"):
        return
    count = len(json.loads(planned.read_text()).get("kernels", []))
    wheel.unlink(missing_ok=True)
    raise UsageError(f'pyproject.toml: [tool.kbuild] ship = "extension" (the default): {count} kernel × target '
                     f"planned, and {wheel.name} holds none of them: CMakeLists.txt never calls "
                     "kbuild_add_kernels(<target> CONFIG pyproject.toml), which compiles them into an extension "
                     "module; the wheel was removed")


@contextlib.contextmanager
def _planned(config_settings: ConfigSettings) -> Iterator[tuple[ModuleType, dict[str, Any], Any]]:
    """Run :func:`plan`; yield the real backend, the config settings for it (with the plan handed over) and the
    step to run on the wheel it builds (its path)."""
    tmp = Path(tempfile.mkdtemp(prefix="kbuild-plan-"))
    try:
        with _reported():
            project = _project()
            manifest = plan(config_settings, tmp, project=project)
        settings = _theirs(config_settings) or {}
        backend = _backend(project)
        if "kbuild" not in _tool(project):
            yield backend, settings, lambda wheel: None
        elif _backend_spec(project) == _SKBUILD:
            from kbuild.build.manifest import nvcc_records

            if manifest is not None:
                settings["cmake.define.KBUILD_MANIFEST"] = str(manifest)
                settings["cmake.define.KBUILD_PRERENDERED"] = str(manifest.parent)
                depends = (manifest.parent / "depends.txt").read_text().split("\n")
                settings["cmake.define.KBUILD_DEPENDS"] = ";".join(d for d in depends if d)
                settings["cmake.define.KBuild_CUDA_INCLUDE_DIR"] = (
                    manifest.parent / "include_dir.txt").read_text().strip()
            with nvcc_records(_skbuild_records_dir(config_settings, project, tmp)) as records:
                def finish(wheel: Path) -> None:
                    with _reported():
                        _ship_cuda(config_settings, project, records, wheel)
                        if manifest is not None:
                            _require_kernels_in(wheel, manifest)

                yield backend, settings, finish
        elif manifest is None:  # CUDA C++ only: the wrapped build_ext lists what kbuild-nvcc compiled
            from .setuptools_plugin import plugin_applied

            with plugin_applied():
                yield backend, settings, lambda wheel: None
        else:
            from .setuptools_plugin import planned_manifest

            # setuptools runs in this process: its build_ext emits this plan (and lists the CUDA C++ kernels
            # kbuild-nvcc compiled), its build_py copies the package data
            with planned_manifest(manifest, staged_package_data(manifest)):
                yield backend, settings, lambda wheel: None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# The PEP 517 / PEP 660 hooks.

def _their_requires(hook_name: str, config_settings: ConfigSettings) -> list[str]:
    """The wrapped backend's ``hook_name`` answer, or the backend itself while it is not installed yet (the
    frontend installs it and asks again)."""
    with _reported():
        name, requirement = _backend_spec()
    try:
        backend = importlib.import_module(name)
    except ImportError:
        return [requirement]
    hook = getattr(backend, hook_name, None)
    return list(hook(_theirs(config_settings)) if hook else [])


def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> list[str]:
    return _their_requires("get_requires_for_build_wheel", config_settings)


def get_requires_for_build_editable(config_settings: ConfigSettings = None) -> list[str]:
    return _their_requires("get_requires_for_build_editable", config_settings)


def get_requires_for_build_sdist(config_settings: ConfigSettings = None) -> list[str]:
    return _their_requires("get_requires_for_build_sdist", config_settings)


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: ConfigSettings = None) -> str:
    with _reported():
        backend = _backend()
    return str(backend.prepare_metadata_for_build_wheel(metadata_directory, _theirs(config_settings)))


def build_wheel(wheel_directory: str, config_settings: ConfigSettings = None,
                metadata_directory: str | None = None) -> str:
    with _planned(config_settings) as (backend, settings, finish):
        name = str(backend.build_wheel(wheel_directory, settings, metadata_directory))
        finish(Path(wheel_directory) / name)
        return name


def build_editable(wheel_directory: str, config_settings: ConfigSettings = None,
                   metadata_directory: str | None = None) -> str:
    with _planned(config_settings) as (backend, settings, finish):
        name = str(backend.build_editable(wheel_directory, settings, metadata_directory))
        finish(Path(wheel_directory) / name)
        return name


def prepare_metadata_for_build_editable(metadata_directory: str, config_settings: ConfigSettings = None) -> str:
    with _reported():
        backend = _backend()
    return str(backend.prepare_metadata_for_build_editable(metadata_directory, _theirs(config_settings)))


def build_sdist(sdist_directory: str, config_settings: ConfigSettings = None) -> str:
    with _reported():
        backend = _backend()
    return str(backend.build_sdist(sdist_directory, _theirs(config_settings)))


__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "plan",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
    "staged_package_data",
]
