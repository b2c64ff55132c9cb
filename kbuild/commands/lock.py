"""``kbuild lock``: pin every kernel × target to the artefact a build would ship now (``kbuild.lock``).

Runs the pipeline (compiling and storing baselines that are missing), then writes the lock file
next to ``pyproject.toml`` with :func:`kbuild.cache.update_lock`. Builds with ``--locked``
(``KBUILD_LOCKED=1``) then use exactly these artefacts.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kbuild.commands.common import LazyStore, add_config_args, settings_from_args, target_list
from kbuild.console import emit_json, info
from kbuild.fsutil import check_output_file


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lock", help="write kbuild.lock pinning each kernel × target to its artefact",
                       description=__doc__.splitlines()[0] if __doc__ else None)
    add_config_args(p)
    p.add_argument("--lock-file", metavar="PATH", help="default: kbuild.lock next to pyproject.toml")
    p.add_argument("--strict", action="store_true", help="fail when a remote store tier is unavailable")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kbuild.build.pipeline import run_pipeline
    from kbuild.cache import update_lock

    settings = settings_from_args(args)
    path = Path(args.lock_file) if args.lock_file is not None else settings.project_dir / "kbuild.lock"
    check_output_file(path, "--lock-file" if args.lock_file is not None else "lock file")  # before any work
    with LazyStore(settings, strict=args.strict) as store:  # opened once every kernel and target resolved
        builds = run_pipeline(settings, store, targets=target_list(args))
        result = update_lock(path, [(b.spec.name, b.target.name, b.key.hex) for b in builds], store)
    if args.json:
        emit_json({"lock_file": str(path), **result.as_dict()})
    else:
        info(f"{path}: {len(result.entries)} entries ({len(result.added)} added, {len(result.changed)} changed, "
             f"{len(result.removed)} removed)")
    return 0
