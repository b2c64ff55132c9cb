"""``kbuild emit``: run the pipeline and write C launchers that embed each target's cubin.

This is the build step behind CMake's ``kbuild_add_kernels`` and the setuptools plugin::

    python -m kbuild emit --config pyproject.toml --out-dir build/kbuild [--prefix kbuild_]

writes ``<basename>.h``, ``<basename>.c`` and ``kbuild.json`` (the wheel manifest) into
``--out-dir``. ``--from-manifest M`` skips the pipeline and emits exactly the artefacts named in
the manifest ``M`` (the backend hook ran the pipeline already). ``--list-sources`` prints the
files the result depends on, one per line, without importing anything (CMake's DEPENDS).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from kbuild.commands.common import LazyStore, add_config_args, settings_from_args, target_list
from kbuild.emit import cuda_include_dir, kernel_sources
from kbuild.errors import UsageError
from kbuild.settings.model import Settings
from kbuild.settings.sources import apply_flags

if TYPE_CHECKING:
    from kbuild.build.plan import BuildPlan

#: Output file of the manifest, next to the C sources.
MANIFEST_FILE = "kbuild.json"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("emit", help="write C launchers embedding the kernels' cubins (used by the build hooks)",
                       description=__doc__.splitlines()[0] if __doc__ else None)
    _add_arguments(p)


def _add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_args(p)
    p.add_argument("--out-dir", metavar="DIR", help="where to write the sources and kbuild.json")
    p.add_argument("--prefix", default="kbuild_", help="prefix of the generated C functions (default: kbuild_)")
    p.add_argument("--basename", default="kbuild_kernels", help="stem of the generated files (default: kbuild_kernels)")
    p.add_argument("--locked", action="store_true", default=None,
                   help="use exactly the artefacts pinned in kbuild.lock (also KBUILD_LOCKED=1)")
    p.add_argument("--lock-file", metavar="PATH", help="lock file (default: kbuild.lock next to pyproject.toml)")
    p.add_argument("--strict", action="store_true", default=None,
                   help="fail when a remote store tier is unavailable (also KBUILD_STRICT=1)")
    p.add_argument("--from-manifest", metavar="KBUILD_JSON", help="emit the artefacts this manifest names")
    p.add_argument("--list-sources", action="store_true", help="print the files the kernels depend on and exit")
    p.add_argument("--print-include-dir", action="store_true",
                   help="print the directory of Triton's cuda.h (first, with --list-sources) and exit")
    p.set_defaults(func=run)


def run_builds(settings: Settings, args: argparse.Namespace) -> BuildPlan:
    """The build's plan (:func:`kbuild.build.plan.plan`), or, with ``--from-manifest`` and not locked, the
    plan that manifest holds."""
    from kbuild.build.manifest import read_manifest
    from kbuild.build.plan import plan, replay

    if args.from_manifest and not (settings.locked or args.lock_file):
        # read (and checked) before the store is opened: a bad manifest changes nothing
        return replay(settings, read_manifest(args.from_manifest), where=args.from_manifest)
    lock = args.lock_file if args.lock_file is not None else (
        settings.project_dir / "kbuild.lock" if settings.locked else None)
    if lock is not None:
        from kbuild.cache import read_lock

        read_lock(lock)  # read and checked before the pipeline (whose memo writes): a bad lock file changes nothing
    # the store opens only once every kernel and target resolved: bad input writes nothing
    with LazyStore(settings) as store:
        result = plan(settings, store, targets=target_list(args), lock_file=args.lock_file)
    for line in result.status_lines():
        print(line, file=sys.stderr)
    return result


def run(args: argparse.Namespace) -> int:
    if args.print_include_dir and not args.list_sources:
        print(cuda_include_dir())
        return 0
    # --locked and --strict beat KBUILD_LOCKED / KBUILD_STRICT and the pyproject
    settings = apply_flags(settings_from_args(args), locked=args.locked, strict=args.strict)
    if args.list_sources:
        if not settings.kernels:
            raise UsageError(f"{settings.config_file}: [tool.kbuild.kernels]: no kernels declared")
        lines = ([cuda_include_dir()] if args.print_include_dir else []) + kernel_sources(settings)
        sys.stdout.write("".join(f"{p}\n" for p in lines))
        return 0
    if args.out_dir is None:
        raise UsageError("emit: --out-dir is required")
    from kbuild.emit import check_output_names, write_files
    from kbuild.fsutil import check_output_dir

    out_dir = check_output_dir(args.out_dir, "--out-dir")  # before any work
    check_output_names(args.prefix, args.basename)
    if args.lock_file == "":
        raise UsageError("--lock-file: empty path")
    result = run_builds(settings, args)
    written = write_files(out_dir, result.files(prefix=args.prefix, basename=args.basename),
                          what=f"--out-dir {out_dir}")
    if args.json:
        from kbuild.console import emit_json

        emit_json({"files": [str(p) for p in written], "manifest": result.manifest})
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m kbuild.commands.emit``: the same verb without loading every other command (what
    CMake runs, to keep all-hit builds cheap)."""
    import logging

    from kbuild.errors import KBuildError

    p = argparse.ArgumentParser(prog="kbuild emit", description=__doc__.splitlines()[0] if __doc__ else None)
    _add_arguments(p)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    try:
        return run(args)
    except KBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
