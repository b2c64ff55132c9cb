"""``kbuild inspect WHEEL [--json]``: the kernels a wheel ships (its ``.dist-info/kbuild.json``)."""

from __future__ import annotations

import argparse

from kbuild.console import emit_json, print_table


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show the kernel manifest of a wheel built with kbuild",
                       description="Print each kernel × target a wheel ships: its key, cubin digest, tuned or "
                                   "baseline state and speedup (from <name>.dist-info/kbuild.json).")
    p.add_argument("wheel", metavar="WHEEL", help="a .whl file (or a kbuild.json manifest)")
    p.add_argument("--json", action="store_true", help="print the manifest as one JSON document on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kbuild.hooks.manifest import read_manifest, wheel_manifest

    manifest = read_manifest(args.wheel) if args.wheel.endswith(".json") else wheel_manifest(args.wheel)
    if args.json:
        emit_json(manifest)
        return 0
    rows = []
    for e in manifest["kernels"]:
        speedup = e.get("speedup")
        rows.append((e["kernel"], e["target"], e.get("arch", ""), e["key"][:12], e["cubin_sha256"][:12],
                     f"{e.get('cubin_bytes', 0):,} B", e.get("state", ""),
                     f"×{speedup:.3f}" if isinstance(speedup, (int, float)) else "–"))
    print_table(f"{args.wheel} — kbuild {manifest.get('kbuild_version', '?')}, tune = {manifest.get('tune', '?')}",
                ["kernel", "target", "arch", "key", "cubin sha256", "size", "state", "speedup"], rows)
    return 0
