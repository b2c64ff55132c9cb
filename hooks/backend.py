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

Options, as ``--config-settings`` (``pip wheel -C kbuild.locked=true``) or environment variables:
``kbuild.locked`` (``KBUILD_LOCKED``), ``kbuild.strict`` (``KBUILD_STRICT``) and
``kbuild.targets`` (``KBUILD_TARGETS``, comma-separated).
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

# Only the standard library at import time: frontends import this module for every hook.
ConfigSettings = Mapping[str, Any] | None


def env_flag(name: str) -> bool:
    from kbuild.config import env_flag as flag

    return flag(name)

#: The real backends and what to ask for when they are not installed yet.
_SKBUILD = ("scikit_build_core.build", "scikit-build-core>=1.0")
_SETUPTOOLS = ("setuptools.build_meta", "setuptools>=64")


def _pyproject() -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        with open("pyproject.toml", "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        return {}


def _backend_spec() -> tuple[str, str]:
    tool = _pyproject().get("tool", {})
    if "scikit-build" in tool or Path("CMakeLists.txt").is_file():
        return _SKBUILD
    return _SETUPTOOLS


def _backend() -> ModuleType:
    name, _ = _backend_spec()
    return importlib.import_module(name)


def _has_kbuild_table() -> bool:
    return "kbuild" in _pyproject().get("tool", {})


def _flag(config_settings: ConfigSettings, name: str) -> bool:
    value = (config_settings or {}).get(f"kbuild.{name}")
    if value is None:
        return env_flag(f"KBUILD_{name.upper()}")
    if isinstance(value, list):
        value = value[-1]
    return str(value).strip().lower() not in ("", "0", "false", "no", "off")


def _targets(config_settings: ConfigSettings) -> list[str] | None:
    value = (config_settings or {}).get("kbuild.targets")
    if isinstance(value, list):
        value = ",".join(value)
    return [t.strip() for t in str(value).split(",") if t.strip()] if value else None


def _theirs(config_settings: ConfigSettings) -> dict[str, Any] | None:
    """The config settings without kbuild's own ``kbuild.*`` keys (the real backend rejects unknown ones)."""
    if config_settings is None:
        return None
    return {k: v for k, v in config_settings.items() if not k.startswith("kbuild.")}


def _say(message: str) -> None:
    """Build output: frontends show the backend's stderr."""
    print(message, file=sys.stderr, flush=True)


def plan(config_settings: ConfigSettings, out_dir: Path) -> Path | None:
    """Run the pipeline for ./pyproject.toml and write the manifest into ``out_dir``.

    Returns the manifest's path, or None when the project has no ``[tool.kbuild]`` table.
    Raises the pipeline's errors (bad input, ``require``, ``--locked``, ``--strict``).
    """
    if not _has_kbuild_table():
        _say("kbuild: no [tool.kbuild] table in pyproject.toml; building without kernels")
        return None
    from kbuild.cache import TierUnavailableError, open_store
    from kbuild.config import load_settings
    from kbuild.emit import cuda_include_dir, kernel_sources, kernels_from_builds, render_sources, write_files

    from .manifest import build_manifest, manifest_bytes
    from .pipeline import run_pipeline, strict_store_error

    settings = load_settings("pyproject.toml")
    lock = settings.project_dir / "kbuild.lock" if _flag(config_settings, "locked") else None
    try:
        with open_store(settings, strict=_flag(config_settings, "strict")) as store:
            builds = run_pipeline(settings, store, targets=_targets(config_settings), locked=lock, memo=True,
                                   tune_on_miss=True)
    except TierUnavailableError as exc:
        raise strict_store_error(settings, exc) from None
    tuned = sum(1 for b in builds if b.improved)
    _say(f"kbuild: {len(builds)} kernel × target ({tuned} tuned) from store {settings.store_path}"
         + (" (locked)" if lock else ""))
    for b in builds:
        if not b.improved:
            _say(f"kbuild: {b.spec.name} {b.target.name}: {b.status}")

    # Render the sources now, as kbuild_add_kernels would with its default PREFIX and BASENAME:
    # an all-hit build then runs no Python under CMake. (Other options re-emit from the manifest.)
    files = render_sources(kernels_from_builds(builds), config_name=Path(settings.config_file).name)
    files["kbuild.json"] = manifest_bytes(build_manifest(builds, tune=settings.tune))
    write_files(out_dir, files)
    (out_dir / "depends.txt").write_text("".join(f"{p}\n" for p in kernel_sources(settings)))
    (out_dir / "include_dir.txt").write_text(f"{cuda_include_dir()}\n")
    return out_dir / "kbuild.json"


@contextlib.contextmanager
def _planned(config_settings: ConfigSettings) -> Iterator[dict[str, Any]]:
    """Run :func:`plan` and yield the config settings for the real backend."""
    tmp = Path(tempfile.mkdtemp(prefix="kbuild-plan-"))
    try:
        try:
            manifest = plan(config_settings, tmp)
        except Exception as exc:
            from kbuild.errors import KBuildError

            if isinstance(exc, KBuildError) and not env_flag("KBUILD_DEBUG"):
                _say(f"error: {exc}")
                raise SystemExit(exc.exit_code) from None
            raise
        settings = _theirs(config_settings) or {}
        if manifest is not None:
            if _backend_spec() == _SKBUILD:
                settings["cmake.define.KBUILD_MANIFEST"] = str(manifest)
                settings["cmake.define.KBUILD_PRERENDERED"] = str(manifest.parent)
                depends = (manifest.parent / "depends.txt").read_text().split("\n")
                settings["cmake.define.KBUILD_DEPENDS"] = ";".join(d for d in depends if d)
                settings["cmake.define.KBuild_CUDA_INCLUDE_DIR"] = \
                    (manifest.parent / "include_dir.txt").read_text().strip()
            else:
                from . import setuptools_plugin

                setuptools_plugin.PLANNED_MANIFEST = manifest
        try:
            yield settings
        finally:
            if manifest is not None and _backend_spec() != _SKBUILD:
                from . import setuptools_plugin

                setuptools_plugin.PLANNED_MANIFEST = None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# The PEP 517 / PEP 660 hooks.

def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> list[str]:
    name, requirement = _backend_spec()
    try:
        backend = importlib.import_module(name)
    except ImportError:
        return [requirement]
    hook = getattr(backend, "get_requires_for_build_wheel", None)
    return list(hook(_theirs(config_settings)) if hook else [])


def get_requires_for_build_editable(config_settings: ConfigSettings = None) -> list[str]:
    name, requirement = _backend_spec()
    try:
        backend = importlib.import_module(name)
    except ImportError:
        return [requirement]
    hook = getattr(backend, "get_requires_for_build_editable", None)
    return list(hook(_theirs(config_settings)) if hook else [])


def get_requires_for_build_sdist(config_settings: ConfigSettings = None) -> list[str]:
    name, requirement = _backend_spec()
    try:
        backend = importlib.import_module(name)
    except ImportError:
        return [requirement]
    hook = getattr(backend, "get_requires_for_build_sdist", None)
    return list(hook(_theirs(config_settings)) if hook else [])


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: ConfigSettings = None) -> str:
    return str(_backend().prepare_metadata_for_build_wheel(metadata_directory, _theirs(config_settings)))


def build_wheel(wheel_directory: str, config_settings: ConfigSettings = None,
                metadata_directory: str | None = None) -> str:
    with _planned(config_settings) as settings:
        return str(_backend().build_wheel(wheel_directory, settings, metadata_directory))


def build_editable(wheel_directory: str, config_settings: ConfigSettings = None,
                   metadata_directory: str | None = None) -> str:
    with _planned(config_settings) as settings:
        return str(_backend().build_editable(wheel_directory, settings, metadata_directory))


def prepare_metadata_for_build_editable(metadata_directory: str, config_settings: ConfigSettings = None) -> str:
    return str(_backend().prepare_metadata_for_build_editable(metadata_directory, _theirs(config_settings)))


def build_sdist(sdist_directory: str, config_settings: ConfigSettings = None) -> str:
    return str(_backend().build_sdist(sdist_directory, _theirs(config_settings)))


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
]
