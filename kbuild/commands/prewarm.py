"""``kbuild prewarm``: tune and store every kernel × target the store lacks (run on GPU machines)."""

from __future__ import annotations

import argparse

from kbuild.commands.common import add_config_args, settings_from_args, target_list
from kbuild.console import emit_json, print_table, progress


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prewarm", help="compile and tune every kernel × target the store lacks",
                       description="On a GPU machine: compile and tune (within the project's budget) every kernel "
                                   "× target missing from the store, writing each result to the writable tiers as "
                                   "soon as it exists. Idempotent and resumable.")
    add_config_args(p)
    p.add_argument("--kernel", action="append", metavar="NAME", help="only this kernel (repeatable)")
    p.add_argument("--remote", metavar="URL", help="also write to this remote tier (http(s):// or redis://)")
    p.add_argument("--strict", action="store_true", help="fail when a remote tier is down instead of warning")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kbuild.hooks.pipeline import select_kernels, select_targets
    from kbuild.hooks.prewarm import prewarm, summary

    settings = settings_from_args(args)
    total = len(select_kernels(settings, args.kernel)) * len(select_targets(settings, target_list(args)))
    with progress("prewarm", total, enabled=not args.json) as advance:
        builds = prewarm(settings, targets=target_list(args), kernels=args.kernel, remote=args.remote,
                         strict=args.strict, on_step=lambda b: advance(status=f"{b.spec.name} {b.target.name}"))
    rows = [summary(b) for b in builds]
    if args.json:
        emit_json(rows)
        return 0
    print_table(f"kbuild prewarm — store {settings.store_path}" + (f" + {args.remote}" if args.remote else ""),
                ["kernel", "target", "key", "action", "status"],
                [(r["kernel"], r["target"], r["key"][:12], r["action"], r["status"]) for r in rows])
    return 0
