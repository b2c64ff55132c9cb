"""``kbuild compile``: every kernel × target → baseline cubin in the store, and a table."""

from __future__ import annotations

import argparse
from pathlib import Path

from kbuild.commands.common import LazyStore, add_config_args, settings_from_args, target_list
from kbuild.console import emit_json, print_table, progress
from kbuild.fsutil import check_output_dir, write_atomic
from kbuild.settings.sources import apply_flags


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compile", help="compile the project's kernels for each target into the store",
                       description="Compile every [tool.kbuild] kernel for every target (no GPU needed), "
                                   "look each up in the store first, and store new baseline cubins.")
    add_config_args(p)
    p.add_argument("--kernel", action="append", metavar="NAME", help="only this kernel (repeatable)")
    p.add_argument("--out", metavar="DIR", help="also write each cubin to DIR/<kernel>.<target>.cubin")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--strict", action="store_true", default=None,
                   help="fail (exit 4) when a remote store tier is unavailable (also KBUILD_STRICT=1, strict = true)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kbuild.build.pipeline import run_pipeline, strict_store_error
    from kbuild.build.resolve import select_kernels, select_targets
    from kbuild.cache import TierUnavailableError

    settings = apply_flags(settings_from_args(args), strict=args.strict)  # --strict beats KBUILD_STRICT / pyproject
    if args.out:
        check_output_dir(args.out, "--out")  # before any work
    total = len(select_kernels(settings, args.kernel)) * len(select_targets(settings, target_list(args)))
    try:
        with LazyStore(settings) as store, \
                progress("compile", total, enabled=not args.no_progress and not args.json) as advance:
            builds = run_pipeline(settings, store, kernels=args.kernel, targets=target_list(args),
                                  on_step=lambda b: advance(status=f"{b.spec.name} {b.target.name}"))
    except TierUnavailableError as exc:
        raise strict_store_error(settings, exc) from None
    if args.out:
        for b in builds:
            write_atomic(Path(args.out) / f"{b.spec.name}.{b.target.name}.cubin", b.shipped.cubin)
    if args.json:
        emit_json([b.as_json() for b in builds])
    else:
        print_table(f"kbuild compile — store {settings.store_path}",
                    ["kernel", "target", "key", "cubin", "store", "status"],
                    [(b.spec.name, b.target.name, b.key.hex[:12], f"{len(b.shipped.cubin):,} B",
                      "hit" if b.hit else "new", b.status) for b in builds])
    return 0
