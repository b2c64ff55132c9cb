"""``kbuild prewarm``: tune and store every kernel × target the store lacks (run on GPU machines)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kbuild.commands.common import add_config_args, settings_from_args, target_list
from kbuild.console import emit_json, print_table, progress
from kbuild.errors import KBuildError, UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prewarm", help="compile and tune every kernel × target the store lacks",
                       description="On a GPU machine: compile and tune (within the project's budget) every kernel "
                                   "× target missing from the store, writing each result to the writable tiers as "
                                   "soon as it exists. Idempotent and resumable.")
    add_config_args(p)
    p.add_argument("--kernel", action="append", metavar="NAME", help="only this kernel (repeatable)")
    p.add_argument("--remote", metavar="URL", help="also write to this remote tier (http(s):// or redis://)")
    p.add_argument("--strict", action="store_true", help="fail when a remote tier is down instead of warning")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="spread the work over a Ray cluster (kbuild[ray]): one task per kernel × target, each on one "
                        "GPU of the target's architecture (custom resource kbuild_sm_<cc>), results in the shared "
                        "--remote tier; ADDRESS as ray.init takes it (default: [tool.kbuild.prewarm] address, else "
                        "the cluster `ray start` made here, else a new local one)")
    p.add_argument("--backend", choices=["gpu", "model"], default="gpu",
                   help="with --ray: gpu (measure, default) or model (the CPU cost model, a labelled stand-in whose "
                        "results are stored under their own key and never ship)")
    p.add_argument("--lease-seconds", type=float, default=None, metavar="S",
                   help="with --ray: time to live of a task's lease on its entry (default: [tool.kbuild.prewarm] "
                        "lease_seconds, 300)")
    p.add_argument("--no-ship", dest="ship", action="store_false",
                   help="with --ray: do not send the project and kbuild to the nodes through Ray's runtime_env "
                        "(working_dir, py_modules); every node then needs them at the driver's paths")
    p.add_argument("--ray-resources", action="store_true",
                   help="print this machine's kbuild_sm_<cc> resources as JSON, for ray start --resources, and exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kbuild.build.prewarm import prewarm, summary
    from kbuild.build.resolve import select_kernels, select_targets

    if args.ray_resources:
        import json

        from kbuild.prewarm.node import node_resources

        print(json.dumps(node_resources()))
        return 0
    settings = settings_from_args(args)
    if args.ray is not None or settings.prewarm.engine == "ray":
        return run_ray(args, settings)
    if args.backend != "gpu" or args.lease_seconds is not None or not args.ship:
        raise UsageError("--backend, --lease-seconds and --no-ship go with --ray (or [tool.kbuild.prewarm] engine = "
                         "\"ray\")")
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


class PrewarmFailed(KBuildError):
    """Some entries of a distributed prewarm failed (each reported above); the others were stored. Exit status 1."""


def run_ray(args: argparse.Namespace, settings: Any) -> int:
    """``--ray``: :func:`kbuild.prewarm.ray_engine.prewarm_ray` with a live bar per target; a table (or ``--json``)
    of every entry, then the failures with their node, GPU and error; exit status 1 when any failed. ``--ray`` and
    ``--lease-seconds`` are held to the settings model's rules first (:func:`kbuild.settings.sources.apply_flag`). While
    Ray runs, whatever it prints on its own (``(raylet) A worker died...``) goes to stderr: stdout holds the table
    or the one JSON document."""
    from kbuild.settings.sources import apply_flag

    settings = apply_flag(settings, "prewarm.address", args.ray or None, flag="--ray")
    settings = apply_flag(settings, "prewarm.lease_seconds", args.lease_seconds, flag="--lease-seconds")
    from kbuild.extras import require

    require("ray", "kbuild prewarm --ray")
    from kbuild.console import stdout_to_stderr, target_bars
    from kbuild.prewarm.ray_engine import counts_by_target, prewarm_ray

    kernels, targets = args.kernel, target_list(args)
    from kbuild.build.resolve import select_kernels, select_targets

    per_target = {t.name: len(select_kernels(settings, kernels)) for t in select_targets(settings, targets)}
    with stdout_to_stderr(), target_bars(per_target, enabled=not args.json) as update:
        result = prewarm_ray(settings, address=args.ray or None, targets=targets, kernels=kernels,
                             remote=args.remote, backend=args.backend, lease_seconds=args.lease_seconds,
                             ship=args.ship, on_update=lambda entries: update(counts_by_target(entries)))
    if args.json:
        emit_json(result)
    else:
        print_table(f"kbuild prewarm --ray ({result['backend']}) — {result['seconds']:.1f} s, run {result['run_id']}",
                    ["kernel", "target", "key", "state", "host", "gpu", "seconds"],
                    [(e["kernel"], e["target"], e["key"][:12], e["state"], e.get("host", ""), e.get("gpu", ""),
                      e.get("seconds", "")) for e in result["entries"]])
        shards = [(e["kernel"], e["target"], sh) for e in result["entries"] for sh in e.get("shards") or []]
        if shards:
            print_table("level-1 compile shards (Ray CPU tasks)",
                        ["kernel", "target", "shard", "configs", "state", "attempts", "host", "node", "seconds"],
                        [(k, t, sh["id"], len(sh.get("configs") or []), sh.get("state", ""),
                          len(sh.get("attempts") or []), sh.get("host", ""), (sh.get("node") or "?")[:12],
                          sh.get("seconds", "")) for k, t, sh in shards])
        if result.get("workers"):
            print_table("tune workers (one Ray actor per GPU used)",
                        ["resource", "host", "node", "pid", "gpu ids", "warm-up s", "entries", "state"],
                        [(w["resource"], w.get("host") or "?", (w.get("node") or "?")[:12], w.get("pid") or "?",
                          ",".join(w.get("gpu_ids") or []) or "-", w.get("warm_seconds") or "",
                          len(w["entries"]), w["state"] + (f": {w['error']}" if w.get("error") else ""))
                         for w in result["workers"]])
        for note in result.get("notes") or []:
            print(f"note: {note}", file=sys.stderr)
        if result["failures"]:
            print_table("failed (the rest were stored)", ["kernel", "target", "node", "gpu", "error"],
                        [(f["kernel"], f["target"], (f.get("node") or "?")[:12], f.get("gpu") or "?", f["error"])
                         for f in result["failures"]])
    if result["failures"]:
        raise PrewarmFailed(f"{len(result['failures'])} of {len(result['entries'])} entries failed; the others are "
                            f"stored in {', '.join(result['stores'])}")
    return 0
