"""setuptools integration: the kernels' launchers compiled into a project's ``Extension``s.

Two ways in:

* **Automatic** — the ``setuptools.finalize_distribution_options`` entry point
  :func:`finalize_distribution_options`. For a project whose ``pyproject.toml`` has a
  ``[tool.kbuild]`` table and whose distribution has ``ext_modules``, it wraps the ``build_ext``
  command (the project's own, e.g. ``torch.utils.cpp_extension.BuildExtension``, or setuptools')
  so that every extension gets the launchers. Projects without ``[tool.kbuild]`` are untouched.
* **Explicit** — ``cmdclass={"build_ext": kbuild_build_ext(BuildExtension, extensions=["pkg._ext"])}``
  in ``setup()``, to pick the extensions or the C prefix.

Before the extensions compile, the wrapped command plans the build (:func:`kbuild.hooks.pipeline.plan`;
under kbuild's PEP 517 backend it replays the plan the backend already made, handed over with
:func:`planned_manifest`), writes ``kbuild_kernels.c/.h`` into
``build_temp/kbuild`` and adds them to the extensions, with Triton's ``cuda.h`` on the include path
and ``-ldl -pthread``. The manifest goes into the egg-info directory, which the wheel turns into
``.dist-info/kbuild.json``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

#: The manifest the PEP 517 backend planned for the build running in this process (:func:`planned_manifest`).
_PLANNED: ContextVar[Path | None] = ContextVar("kbuild_planned_manifest", default=None)


@contextlib.contextmanager
def planned_manifest(manifest: Path) -> Iterator[None]:
    """Within the block, the wrapped ``build_ext`` emits exactly the artefacts ``manifest`` names instead of
    planning again: :mod:`kbuild.hooks.backend` hands over its plan this way, for setuptools runs the project's
    build in the backend's own process and takes no other input from it."""
    token = _PLANNED.set(manifest)
    try:
        yield
    finally:
        _PLANNED.reset(token)


def _has_kbuild_table(pyproject: Path) -> bool:
    from kbuild.config import read_pyproject
    from kbuild.errors import ConfigError

    try:
        tool = read_pyproject(pyproject).get("tool", {})
    except ConfigError:  # setuptools reports a broken pyproject.toml itself
        return False
    return isinstance(tool, dict) and "kbuild" in tool


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
    from kbuild.config import load_settings
    from kbuild.emit import write_files

    from .manifest import read_manifest
    from .pipeline import plan, replay

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
            self._kbuild_add_kernels()
            super().run()

        def _kbuild_add_kernels(self) -> None:
            from kbuild.emit import cuda_include_dir
            from kbuild.errors import KBuildError

            targets = [e for e in self.extensions if wanted is None or e.name in wanted]
            if not targets:
                return
            try:
                c_file, inc, _ = emit_for_build(config=config, out_dir=Path(self.build_temp).resolve() / "kbuild", prefix=prefix,
                                                manifest_path=_PLANNED.get())
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
            self._kbuild_install_manifest(inc / "kbuild.json")

        def _kbuild_install_manifest(self, manifest: Path) -> None:
            """Put kbuild.json where bdist_wheel takes .dist-info from: the egg-info directory, or the
            prepared metadata directory a PEP 517 frontend handed over (``--dist-info-dir``)."""
            data = manifest.read_bytes()
            dests = [Path(self.get_finalized_command("egg_info").egg_info)]
            bdist = self.distribution.command_obj.get("bdist_wheel")
            if bdist is not None and getattr(bdist, "dist_info_dir", None):
                dests.append(Path(bdist.dist_info_dir))
            for dest in dests:
                dest.mkdir(parents=True, exist_ok=True)
                (dest / "kbuild.json").write_bytes(data)

    KBuildBuildExt.__name__ = f"KBuild{base_cls.__name__}"
    KBuildBuildExt.__qualname__ = KBuildBuildExt.__name__
    return KBuildBuildExt


def finalize_distribution_options(dist: Any) -> None:
    """Entry point ``setuptools.finalize_distribution_options``: wrap ``build_ext`` for kbuild projects."""
    if not getattr(dist, "ext_modules", None):
        return
    if not _has_kbuild_table(Path("pyproject.toml")):
        return
    base = dist.cmdclass.get("build_ext")
    if base is not None and getattr(base, "_kbuild_wrapped", False):
        return
    dist.cmdclass["build_ext"] = kbuild_build_ext(base)


__all__ = ["emit_for_build", "finalize_distribution_options", "kbuild_build_ext", "planned_manifest"]
