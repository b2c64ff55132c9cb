"""``kbuild inspect WHEEL [--json]``: the kernels a wheel ships (its ``.dist-info/kbuild.json``)."""

from __future__ import annotations

import argparse

from kbuild.console import emit_json, print_table, table_text


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show the kernel manifest of a wheel built with kbuild",
                       description="Print each kernel × target a wheel ships: its key, cubin digest, tuned or "
                                   "baseline state and speedup (from <name>.dist-info/kbuild.json).")
    p.add_argument("wheel", metavar="WHEEL", help="a .whl file (or a kbuild.json manifest)")
    p.add_argument("--json", action="store_true", help="print the manifest as one JSON document on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kbuild.hooks.manifest import read_manifest, wheel_manifest

    # Both readers check the manifest's size and shape first (hooks.manifest.check_manifest): every
    # field used below has its type. Its strings are still untrusted: the table shows them through
    # table_text (no terminal escapes, no rich markup); --json keeps them, JSON-escaped.
    manifest = read_manifest(args.wheel) if args.wheel.endswith(".json") else wheel_manifest(args.wheel)
    if args.json:
        emit_json(manifest)
        return 0
    rows = []
    for e in manifest["kernels"]:
        speedup = e.get("speedup")
        cells = (e["kernel"], e["target"], e.get("arch") or "", e["key"][:12], e["cubin_sha256"][:12],
                 f"{e.get('cubin_bytes') or 0:,} B", e.get("state") or "",
                 f"×{speedup:.3f}" if isinstance(speedup, (int, float)) else "–")
        rows.append(tuple(table_text(c) for c in cells))
    title = (f"{args.wheel} — kbuild {manifest.get('kbuild_version') or '?'}, "
             f"tune = {manifest.get('tune') or '?'}")
    print_table(table_text(title), ["kernel", "target", "arch", "key", "cubin sha256", "size", "state", "speedup"],
                rows)
    return 0
