"""``kbuild inspect WHEEL [--json]``: the kernels a wheel ships (its ``.dist-info/kbuild.json``)."""

from __future__ import annotations

import argparse

from kbuild.console import emit_json, print_table, table_text


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show the kernel manifest of a wheel built with kbuild",
                       description="Print each kernel × target a wheel ships: its key, cubin digest, tuned or "
                                   "baseline state, speedup, the launch configuration it ships (* marks the "
                                   "default) and the tuner's level-1 (configuration) and level-2 (SASS) gains "
                                   "(from <name>.dist-info/kbuild.json).")
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
        gains = e.get("gains") or {}
        cells = (e["kernel"], e["target"], e.get("arch") or "", e["key"][:12], e["cubin_sha256"][:12],
                 f"{e.get('cubin_bytes') or 0:,} B", e.get("state") or "", _ratio(speedup), config_cell(e),
                 _ratio(gains.get("level1")), _ratio(gains.get("level2")))
        rows.append(tuple(table_text(c) for c in cells))
    title = (f"{args.wheel} — kbuild {manifest.get('kbuild_version') or '?'}, "
             f"tune = {manifest.get('tune') or '?'}")
    print_table(table_text(title), ["kernel", "target", "arch", "key", "cubin sha256", "size", "state", "speedup",
                                    "config", "level 1", "level 2"], rows)
    return 0


def _ratio(value: object) -> str:
    return f"×{value:.3f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "–"


def config_cell(entry: dict[str, object]) -> str:
    """The entry's configuration label (:func:`kbuild.space.label`), ``*`` after the default; ``–`` for a manifest
    from before configurations were recorded."""
    from kbuild.space import label

    config = entry.get("config")
    if not isinstance(config, dict):
        return "–"
    return label(config) + (" *" if entry.get("default_config") else "")
