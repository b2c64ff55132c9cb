"""``kbuild explain KERNEL --target SM``: the key's components, and whether the store has it."""

from __future__ import annotations

import argparse
import json

from kbuild.commands.common import add_config_args, settings_from_args
from kbuild.console import emit_json, print_table


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("explain", help="show what goes into a kernel's key and whether the store has it",
                       description="Print every component of the content key of KERNEL for one target: the "
                                   "baseline key (what `kbuild compile` stores) and the tuned key (what a build "
                                   "looks up first).")
    p.add_argument("kernel", metavar="KERNEL")
    add_config_args(p, targets=False)
    p.add_argument("--target", required=True, metavar="SM", help="e.g. sm_90")
    p.add_argument("--no-store", action="store_true", help="do not look the keys up in the store")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kbuild.build.resolve import resolve, select_targets

    settings = settings_from_args(args)
    targets = select_targets(settings, [args.target])
    (build,) = resolve(settings, [settings.kernel(args.kernel)], targets)
    in_store: dict[str, bool | None] = {"baseline": None, "tuned": None}
    if not args.no_store:
        from kbuild.cache import open_store

        store = open_store(settings)
        in_store["baseline"] = store.contains(build.baseline_key.hex)
        if build.tuned_key is not None:
            in_store["tuned"] = store.contains(build.tuned_key.hex)
    doc = {
        "kernel": build.spec.name,
        "target": build.target.name,
        "baseline_key": build.baseline_key.hex,
        "tuned_key": build.tuned_key.hex if build.tuned_key else None,
        "components": build.baseline_key.components,
        "tuner": build.tuned_key.components["tuner"] if build.tuned_key else None,
        "in_store": in_store,
    }
    if args.json:
        emit_json(doc)
        return 0
    rows = [(k, v if isinstance(v, (str, int, float, bool)) else json.dumps(v, sort_keys=True))
            for k, v in build.baseline_key.flat().items() if k != "tuner"]
    tuner = build.tuned_key.components["tuner"] if build.tuned_key is not None else None
    rows.append(("tuner (tuned key only)", json.dumps(tuner, sort_keys=True) if tuner else "(tune = off)"))
    print_table(f"key of {build.spec.name} for {build.target.name} ({build.target.arch})", ["component", "value"], rows)
    def mark(v: bool | None) -> str:
        return "not checked" if v is None else ("in store" if v else "not in store")
    print_table(None, ["key", "sha256", "store"], [
        ("baseline", build.baseline_key.hex, mark(in_store["baseline"])),
        ("tuned", build.tuned_key.hex if build.tuned_key else "(tune = off)", mark(in_store["tuned"])),
    ])
    return 0
