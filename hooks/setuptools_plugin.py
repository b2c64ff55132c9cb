"""setuptools integration: the kernels' launchers compiled into a project's ``Extension``s, or, for
``ship = "package-data"``, the shipped cubins written into the wheel as package data.

Two ways in:

* **Automatic** — the ``setuptools.finalize_distribution_options`` entry point
  :func:`finalize_distribution_options`. For a project whose ``pyproject.toml`` has a
  ``[tool.kbuild]`` table and whose distribution has ``ext_modules``, it wraps the ``build_ext``
  command (the project's own, e.g. ``torch.utils.cpp_extension.BuildExtension``, or setuptools')
  so that every extension gets the launchers, and the ``build_py`` command (:func:`kbuild_build_py`), which
  writes the package data of a ``ship = "package-data"`` project. Projects without ``[tool.kbuild]`` are untouched.
* **Explicit** — ``cmdclass={"build_ext": kbuild_build_ext(BuildExtension, extensions=["pkg._ext"])}``
  in ``setup()``, to pick the extensions or the C prefix.

Before the extensions compile, the wrapped command plans the build (:func:`kbuild.build.plan.plan`;
under kbuild's PEP 517 backend it replays the plan the backend already made, handed over with
:func:`planned_manifest`), writes ``kbuild_kernels.c/.h`` into
``build_temp/kbuild`` and adds them to the extensions, with Triton's ``cuda.h`` on the include path
and ``-ldl -pthread``. The manifest goes into the egg-info directory, which the wheel turns into
``.dist-info/kbuild.json``.

Package data (``ship = "package-data"``): after ``build_py`` has copied the sources into ``build_lib``, the
wrapped command writes ``<build_lib>/<package>/_kbuild/`` (:func:`kbuild.build.package_data.write_package_data`:
``index.json``, ``<sha256>.cubin``, ``__init__.py``) and the manifest, so both land in the wheel and nothing is
written into the project's source tree (``build_lib`` is setuptools' own build directory). Under the backend the
files were already written into the backend's temporary directory and are copied from there.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class _Handover:
    manifest: Path
    package_data: Path | None
    """``<dir>/<package>`` holding ``_kbuild/`` as :func:`kbuild.build.package_data.write_package_data` wrote it,
    under ``ship = "package-data"``; None otherwise."""


#: The plan the PEP 517 backend made for the build running in this process (:func:`planned_manifest`).
_PLANNED: ContextVar[_Handover | None] = ContextVar("kbuild_planned_manifest", default=None)


@contextlib.contextmanager
def planned_manifest(manifest: Path, package_data: Path | None = None) -> Iterator[None]:
    """Within the block, the wrapped ``build_ext`` emits exactly the artefacts ``manifest`` names instead of
    planning again, and the wrapped ``build_py`` copies ``package_data/_kbuild`` (the package data the backend
    wrote for ``ship = "package-data"``; ``package_data`` is named like the import package, dots as folders)
    into ``build_lib``: :mod:`kbuild.hooks.backend` hands over its plan this way, for setuptools runs the
    project's build in the backend's own process and takes no other input from it.

    The commands are wrapped by the entry point :func:`finalize_distribution_options`, which setuptools finds
    only when kbuild is *installed* (its ``.dist-info`` lists it). When kbuild is merely importable (a checkout
    on ``PYTHONPATH`` with ``--no-build-isolation``), the entry point is invisible and the wheel would silently
    ship no package data and no launchers; within this block the backend then applies the same function itself,
    after setuptools' own ``Distribution.finalize_options``."""
    token = _PLANNED.set(_Handover(manifest, package_data))
    try:
        with plugin_applied():
            yield
    finally:
        _PLANNED.reset(token)


def _entry_point_registered() -> bool:
    """Whether setuptools will call :func:`finalize_distribution_options` through its entry point."""
    from importlib.metadata import entry_points

    target = "kbuild.hooks.setuptools_plugin:finalize_distribution_options"
    found = entry_points(group="setuptools.finalize_distribution_options")
    return any(ep.value.replace(" ", "") == target for ep in found)


@contextlib.contextmanager
def plugin_applied() -> Iterator[None]:
    """Make sure :func:`finalize_distribution_options` runs for distributions finalised in this block (the entry
    point is invisible when kbuild is importable but not installed)."""
    if _entry_point_registered():
        yield
        return
    from setuptools.dist import Distribution

    original = Distribution.finalize_options

    def finalize_options(self: Any) -> None:
        original(self)
        finalize_distribution_options(self)

    Distribution.finalize_options = finalize_options  # type: ignore[method-assign]
    try:
        yield
    finally:
        Distribution.finalize_options = original  # type: ignore[method-assign]


def _has_kbuild_table(pyproject: Path) -> bool:
    from kbuild.errors import ConfigError
    from kbuild.settings.sources import read_pyproject

    try:
        tool = read_pyproject(pyproject).get("tool", {})
    except ConfigError:  # setuptools reports a broken pyproject.toml itself
        return False
    return isinstance(tool, dict) and "kbuild" in tool


def _ships_package_data() -> bool:
    """Whether this build writes package data: the backend's plan says so, or (plain setuptools) the settings
    have ``ship = "package-data"``. Settings that do not load count as yes: the wrapped ``build_py`` then
    reports their error instead of the wheel silently lacking its package data."""
    from kbuild.errors import KBuildError
    from kbuild.settings.sources import load_settings

    handed = _PLANNED.get()
    if handed is not None:
        return handed.package_data is not None
    try:
        return load_settings("pyproject.toml").ship == "package-data"
    except KBuildError:
        return True


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _add_args(current: Any, extra: Sequence[str], key: str = "cxx") -> Any:
    """Append to ``extra_compile_args``/``extra_link_args``, which torch allows to be a dict per compiler."""
    if isinstance(current, dict):
        out = dict(current)
        out[key] = [*out.get(key, []), *(a for a in extra if a not in out.get(key, []))]
        return out
    current = list(current or [])
    return current + [a for a in extra if a not in current]


def emit_for_build(*, config: str | Path = "pyproject.toml", out_dir: str | Path, prefix: str = "kbuild_",
                   manifest_path: Path | None = None) -> tuple[Path, Path, dict[str, Any]]:
    """Plan the build (or replay ``manifest_path``, a plan already made) and write the sources into ``out_dir``;
    (C file, include dir, manifest)."""
    from kbuild.build.manifest import read_manifest
    from kbuild.build.plan import plan, replay
    from kbuild.emit import write_files
    from kbuild.settings.sources import load_settings

    settings = load_settings(config)
    if manifest_path is not None:
        result = replay(settings, read_manifest(manifest_path), where=str(manifest_path))
    else:
        result = plan(settings)
        for line in result.status_lines():
            _say(line)
    out = Path(out_dir)
    write_files(out, result.files(prefix=prefix), what=f"build_ext's kbuild directory {out}")
    return out / "kbuild_kernels.c", out, result.manifest


def _kbuild_nvcc() -> str:
    exe = Path(sys.executable).parent / "kbuild-nvcc"
    return str(exe) if exe.is_file() else (shutil.which("kbuild-nvcc") or str(exe))


def _real_nvcc() -> str | None:
    """The nvcc torch would run (``$CUDA_HOME/bin/nvcc``), else the one from the package index."""
    from kbuild.nvcc.toolkit import find_nvcc

    try:
        from torch.utils import cpp_extension

        home = cpp_extension.CUDA_HOME
    except ImportError:
        home = None
    if home and (Path(home) / "bin" / "nvcc").is_file():
        return str(Path(home) / "bin" / "nvcc")
    found = find_nvcc()
    return str(found) if found is not None else None


@contextlib.contextmanager
def pytorch_nvcc(extensions: Sequence[Any], *, config: str | Path = "pyproject.toml") -> Iterator[None]:
    """While torch's ``BuildExtension`` runs: ``PYTORCH_NVCC="kbuild-nvcc <nvcc>"`` (torch's ninja file then names
    it as ``$nvcc``) and ``KBUILD_NVCC_PROJECT`` (the launcher's ``[tool.kbuild.cuda]``), for extensions with
    ``.cu`` sources; both restored afterwards. A ``PYTORCH_NVCC`` the user set is left alone (say once)."""
    from kbuild.settings.environ import env_value, scoped
    from kbuild.settings.variables import env_var

    has_cuda = any(str(src).endswith(".cu") for e in extensions for src in getattr(e, "sources", []))
    if not has_cuda:
        yield
        return
    if env_value("PYTORCH_NVCC") is not None:
        _say("kbuild: PYTORCH_NVCC is set; CUDA sources compile with it, not through kbuild-nvcc")
        yield
        return
    nvcc = _real_nvcc()
    if nvcc is None:
        _say("kbuild: no nvcc found (CUDA_HOME, or pip install 'kbuild[cuda]'); CUDA sources compile as torch decides")
        yield
        return
    new = {"PYTORCH_NVCC": f"{shlex.quote(_kbuild_nvcc())} {shlex.quote(nvcc)}",
           env_var("nvcc_project"): str(Path(config).resolve())}  # written for the children; read by kbuild.settings
    with scoped(new):
        yield


def _cuda_only(config: str | Path) -> bool:
    """Whether the project declares CUDA C++ kernels (``[tool.kbuild.cuda]``) and no Triton kernels. Settings that
    do not load count as no: planning then reports their error."""
    from kbuild.errors import KBuildError
    from kbuild.settings.sources import load_settings

    try:
        settings = load_settings(config)
    except KBuildError:
        return False
    return not settings.kernels and bool(settings.cuda.kernels)


def kbuild_build_ext(base: type | None = None, *, extensions: Sequence[str] | None = None,
                     config: str = "pyproject.toml", prefix: str = "kbuild_") -> type:
    """A ``build_ext`` command class derived from ``base`` that adds the kernels' launchers.

    ``extensions``: names of the extensions that get them (default: all of the distribution's).
    """
    if base is None:
        from setuptools.command.build_ext import build_ext as base_cls
    else:
        base_cls = base
    wanted = None if extensions is None else set(extensions)

    class KBuildBuildExt(base_cls):  # type: ignore[misc, valid-type]
        _kbuild_wrapped = True

        def run(self) -> None:
            from kbuild.build.manifest import nvcc_records

            self._kbuild_manifest: dict[str, Any] | None = None
            # kbuild-nvcc's records in build_temp, which a later build in the same tree reuses with its objects
            records_dir = Path(self.build_temp).resolve() / "kbuild" / "nvcc-records"
            with pytorch_nvcc(self.extensions, config=config), nvcc_records(records_dir) as records:
                self._kbuild_add_kernels()
                super().run()
            self._kbuild_cuda_manifest(records)

        def _kbuild_cuda_manifest(self, records: Path) -> None:
            """The declared CUDA C++ kernels that kbuild-nvcc compiled (its records) into the manifest."""
            from kbuild.build.manifest import build_manifest, declared_cuda_entries, manifest_bytes, with_cuda
            from kbuild.errors import KBuildError
            from kbuild.settings.sources import load_settings

            try:
                settings = load_settings(config)
                if not settings.cuda.kernels:
                    return
                entries, lines = declared_cuda_entries(settings, records)
            except KBuildError as exc:
                _say(f"error: {exc}")
                raise SystemExit(exc.exit_code) from None
            for line in lines:
                _say(line)
            if entries:
                manifest = self._kbuild_manifest or build_manifest([], tune=settings.tune)
                install_manifest(self, manifest_bytes(with_cuda(manifest, entries)))
                _say(f"kbuild: {len(entries)} CUDA kernel × target in the manifest")

        def _kbuild_add_kernels(self) -> None:
            from kbuild.emit import cuda_include_dir
            from kbuild.errors import KBuildError

            targets = [e for e in self.extensions if wanted is None or e.name in wanted]
            if not targets:
                return
            handed = _PLANNED.get()
            if handed is None and _cuda_only(config):
                return  # no Triton kernels to launch: kbuild-nvcc compiles the CUDA C++ ones
            try:
                c_file, inc, _ = emit_for_build(config=config, out_dir=Path(self.build_temp).resolve() / "kbuild", prefix=prefix,
                                                manifest_path=None if handed is None else handed.manifest)
            except KBuildError as exc:
                _say(f"error: {exc}")
                raise SystemExit(exc.exit_code) from None
            root = Path.cwd().resolve()
            for ext in targets:
                if str(c_file) not in ext.sources:
                    ext.sources.append(str(c_file))
                ext.include_dirs = [*ext.include_dirs, str(inc), str(cuda_include_dir())]
                ext.libraries = [*ext.libraries, *(["dl"] if "dl" not in ext.libraries else [])]
                ext.extra_link_args = _add_args(ext.extra_link_args, ["-pthread"])
                # Reproducible objects: no checkout or build path in debug info.
                ext.extra_compile_args = _add_args(ext.extra_compile_args, [f"-ffile-prefix-map={root}=."])
            data = (inc / "kbuild.json").read_bytes()
            install_manifest(self, data)
            self._kbuild_manifest = json.loads(data)

    KBuildBuildExt.__name__ = f"KBuild{base_cls.__name__}"
    KBuildBuildExt.__qualname__ = KBuildBuildExt.__name__
    return KBuildBuildExt


def install_manifest(cmd: Any, data: bytes) -> None:
    """Put kbuild.json (``data``) where bdist_wheel takes .dist-info from: the egg-info directory of ``cmd``'s
    distribution, or the prepared metadata directory a PEP 517 frontend handed over (``--dist-info-dir``)."""
    from kbuild.build.manifest import MANIFEST_NAME

    dests = [Path(cmd.get_finalized_command("egg_info").egg_info)]
    bdist = cmd.distribution.command_obj.get("bdist_wheel")
    if bdist is not None and getattr(bdist, "dist_info_dir", None):
        dests.append(Path(bdist.dist_info_dir))
    for dest in dests:
        dest.mkdir(parents=True, exist_ok=True)
        (dest / MANIFEST_NAME).write_bytes(data)


def package_dir_in(build_lib: str | Path, package: str, *, config: str | Path) -> Path:
    """The import package's folder under ``build_lib``, which ``build_py`` must have made; a :class:`UsageError`
    naming the config file otherwise (the kernels' package is not one this distribution ships)."""
    from kbuild.errors import UsageError

    folder = Path(build_lib).joinpath(*package.split("."))
    if not folder.is_dir():
        raise UsageError(f"{config}: [tool.kbuild] ship = \"package-data\": the kernels live in package {package!r}, "
                         f"which this distribution does not build (no {folder}); list it in the project's packages")
    return folder


def copy_package_data(staged: Path, package_dir: Path) -> list[Path]:
    """Replace ``package_dir/_kbuild`` (kbuild's own folder) by ``staged/_kbuild``; the files copied, sorted."""
    import shutil

    from kbuild.fsutil import write_atomic
    from kbuild.runtime.index import DATA_DIR

    dest = package_dir / DATA_DIR
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.is_dir():
        shutil.rmtree(dest)
    out = []
    for src in sorted(p for p in (staged / DATA_DIR).iterdir() if p.is_file()):
        out.append(write_atomic(dest / src.name, src.read_bytes()))
    return out


def write_for_build(build_lib: str | Path, *, config: str | Path = "pyproject.toml",
                    staged: Path | None = None, manifest_path: Path | None = None) -> tuple[list[Path], bytes] | None:
    """The package data of a ``ship = "package-data"`` project, written into its package under ``build_lib``.

    ``staged``/``manifest_path``: what the backend already wrote (:func:`planned_manifest`), copied as it is;
    otherwise the project is planned here (:func:`kbuild.build.plan.plan`). Returns (files written, manifest
    bytes), or None when the project ships extensions instead."""
    from kbuild.build.manifest import manifest_bytes
    from kbuild.build.package_data import infer_package, write_package_data
    from kbuild.build.plan import plan
    from kbuild.settings.sources import load_settings

    if staged is not None and manifest_path is not None:
        folder = package_dir_in(build_lib, staged.name, config=config)
        _say_if_not_enabled(folder, staged.name)
        return copy_package_data(staged, folder), manifest_path.read_bytes()
    settings = load_settings(config)
    if settings.ship != "package-data":
        return None
    result = plan(settings)
    for line in result.status_lines():
        _say(line)
    package = infer_package(settings, result.builds)
    folder = package_dir_in(build_lib, package, config=settings.config_file)
    _say_if_not_enabled(folder, package)
    data = write_package_data(settings, result.builds, folder, package=package)
    loud = data.nothing_ships(settings)
    if loud:
        _say(f"warning: {loud}")
    if result.recordings is not None:
        from kbuild.build.recorded import coverage_lines

        for line in coverage_lines(result.recordings, data.index, data.data_dir):
            _say(f"kbuild: recordings: {line}")
    return data.files, manifest_bytes(result.manifest)


def _say_if_not_enabled(folder: Path, package: str) -> None:
    from kbuild.build.package_data import opt_in_missing

    loud = opt_in_missing(folder, package)
    if loud:
        _say(f"warning: {loud}")


def kbuild_build_py(base: type | None = None, *, config: str = "pyproject.toml") -> type:
    """A ``build_py`` command class derived from ``base`` that writes the package data of a
    ``ship = "package-data"`` project into ``build_lib`` (and the manifest into the metadata); a no-op for
    other projects."""
    if base is None:
        from setuptools.command.build_py import build_py as base_cls
    else:
        base_cls = base

    class KBuildBuildPy(base_cls):  # type: ignore[misc, valid-type]
        _kbuild_wrapped = True

        def run(self) -> None:
            super().run()
            if getattr(self, "editable_mode", False):  # an editable install imports the source tree
                return
            self._kbuild_package_data()

        def _kbuild_package_data(self) -> None:
            from kbuild.errors import KBuildError

            handed = _PLANNED.get()
            if handed is not None and handed.package_data is None:
                return  # the backend planned a build that ships no package data
            try:
                written = write_for_build(self.build_lib, config=config,
                                          staged=None if handed is None else handed.package_data,
                                          manifest_path=None if handed is None else handed.manifest)
            except KBuildError as exc:
                _say(f"error: {exc}")
                raise SystemExit(exc.exit_code) from None
            if written is None:
                return
            files, manifest = written
            _say(f"kbuild: package data: {len(files)} files in {files[0].parent if files else self.build_lib}")
            install_manifest(self, manifest)

    KBuildBuildPy.__name__ = f"KBuild{base_cls.__name__}"
    KBuildBuildPy.__qualname__ = KBuildBuildPy.__name__
    return KBuildBuildPy


def _refuse_to_ship_nothing() -> None:
    """A project that declares Triton kernels and ships them in an extension (``ship = "extension"``, the default)
    but builds no extension module would get a wheel without a single kernel, and exit 0: stop instead, with one
    ``error:`` line naming the setting, and exit status 2 (before setuptools writes anything into the wheel)."""
    from kbuild.errors import ExitCode, KBuildError
    from kbuild.settings.sources import load_settings

    if _ships_package_data():
        return
    try:
        settings = load_settings("pyproject.toml")
    except KBuildError:  # the backend's plan, or kbuild's own commands, report a broken [tool.kbuild]
        return
    if settings.ship != "extension" or not settings.kernels:
        return
    count = len(settings.kernels)
    _say(f'error: {settings.config_file}: [tool.kbuild] ship = "extension" (the default) embeds the kernels in an '
         f"extension module, and this project builds none, so none of its {count} declared Triton kernel"
         f"{'s' if count != 1 else ''} would ship; for a package that runs its @triton.jit kernels just in time "
         'set ship = "package-data" (the cubins go into <package>/_kbuild/ and kbuild.runtime loads them), or add '
         "an extension module for kbuild's launchers (ext_modules)")
    raise SystemExit(int(ExitCode.USAGE))


def finalize_distribution_options(dist: Any) -> None:
    """Entry point ``setuptools.finalize_distribution_options``: for kbuild projects, wrap ``build_py`` (package
    data) and, when there are extensions, ``build_ext`` (launchers)."""
    if not _has_kbuild_table(Path("pyproject.toml")):
        return
    base_py = dist.cmdclass.get("build_py")
    if _ships_package_data() and (base_py is None or not getattr(base_py, "_kbuild_wrapped", False)):
        dist.cmdclass["build_py"] = kbuild_build_py(base_py)
    if not getattr(dist, "ext_modules", None):
        _refuse_to_ship_nothing()
        return
    base = dist.cmdclass.get("build_ext")
    if base is not None and getattr(base, "_kbuild_wrapped", False):
        return
    dist.cmdclass["build_ext"] = kbuild_build_ext(base)


__all__ = ["copy_package_data", "emit_for_build", "finalize_distribution_options", "install_manifest",
           "kbuild_build_ext", "kbuild_build_py", "package_dir_in", "planned_manifest", "plugin_applied",
           "write_for_build"]
