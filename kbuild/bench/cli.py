"""``kbuild bench``: run the kernel suite on this machine's GPU and record the numbers.

Per kernel it prints the autotuned baseline's time, TFLOP/s or GB/s, the percentage of the
machine's ceilings measured in the same run, the A/A spread, and its peers (cuBLAS, torch SDPA
backends, torch composites: ``peer_ms / kernel_ms``, above 1 when the kernel is faster, timed in the
same rounds; ``--no-peers`` skips them); it writes ``bench.json`` (raw samples, GPU, driver, clocks,
versions, command line), ``bench.png`` and ``bench.md`` under ``--out``. ``--config KERNEL=LABEL``
or ``--configs-from FILE`` times a given configuration (what ships) instead of the autotune best.
Without a GPU it exits 2 with "no sm_90 GPU here; measurement needs one".

``--recording FILE`` also benchmarks what a ``kbuild record`` recording's calls give, with no hand-written spec
(:mod:`kbuild.bench.recorded`: one spec per kernel, its most called specialisation; with ``--captures DIR`` or
the folder beside the recording, integer tensors replayed from ``kbuild record --capture``);
``--recording FILE --list`` says, without a GPU, which kernels give a spec, whose inputs are generated or
replayed, and why the others are refused.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from kbuild.bench.kernels import SUITE
from kbuild.errors import ExitCode, UsageError


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("bench", help="benchmark the kernel suite on this GPU",
                              description=__doc__.split("\n\n")[0] if __doc__ else None)
    configure(p)
    p.set_defaults(func=handler)
    return p


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("kernels", nargs="*", metavar="KERNEL", help="suite kernels to run (default: all; see --list)")
    p.add_argument("--list", action="store_true", help="list the suite's kernels and exit (no GPU needed)")
    p.add_argument("--spec", action="append", default=[], metavar="MODULE:CALLABLE",
                   help="also benchmark a project's bench spec (repeatable)")
    p.add_argument("--recording", type=Path, metavar="FILE",
                   help="also benchmark the calls a `kbuild record` recording holds, one spec per kernel (with "
                        "--list: which kernels give a spec, and why not the others; no GPU needed)")
    p.add_argument("--captures", type=Path, metavar="DIR",
                   help="--recording: the `kbuild record --capture` folder (default: the one beside FILE)")
    p.add_argument("--out", type=Path, default=Path("kbuild-bench"), help="directory for bench.json/png/md")
    p.add_argument("--json", action="store_true", help="print the JSON record on stdout")
    p.add_argument("--small", action="store_true", help="reduced problem sizes (smoke test, not for numbers)")
    p.add_argument("--rounds", type=int, default=6, help="A/A rounds per kernel (default 6)")
    p.add_argument("--reps", type=int, default=10, help="launches per variant per round (default 10)")
    p.add_argument("--autotune-reps", type=int, default=10,
                   help="launches per configuration while picking the baseline (default 10)")
    p.add_argument("--no-chart", action="store_true", help="skip the PNG chart")
    p.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True,
                   help="time each kernel's peers (cuBLAS, torch SDPA backends, torch composites) in the same "
                        "rounds and report peer/kernel time ratios (default: on)")
    p.add_argument("--config", action="append", default=[], metavar="KERNEL=LABEL",
                   help="time this configuration of KERNEL (a label of its search space, as in bench.json) "
                        "instead of the autotune best; repeatable")
    p.add_argument("--configs-from", type=Path, metavar="FILE",
                   help="the configurations to time (what ships): a JSON object {kernel: label or config object "
                        "(constexprs, num_warps, ...)}, or a bench/tune JSON record (each kernel's best_label); "
                        "--config overrides it")


def pinned_configs(args: argparse.Namespace) -> dict[str, Any]:
    """``--configs-from`` then ``--config`` as {kernel: label or config mapping}, each checked against its spec
    (a label of its search space, or a configuration that validates). Bad input is a UsageError naming the file,
    the key or the argument; nothing runs. Needs no GPU."""
    from kbuild.bench.runner import resolve_config
    from kbuild.bench.spec import load_spec
    from kbuild.jsonio import read_json_file

    pinned: dict[str, tuple[str, Any]] = {}
    if args.configs_from is not None:
        where = str(args.configs_from)
        doc = read_json_file(args.configs_from, where=where)
        if not isinstance(doc, dict):
            raise UsageError(f"{where}: expected a JSON object {{kernel: label or config}}, got {type(doc).__name__}")
        if isinstance(doc.get("kernels"), list):  # a `kbuild bench`/`kbuild tune` record: each kernel's best_label
            for i, k in enumerate(doc["kernels"]):
                if not isinstance(k, dict):
                    raise UsageError(f"{where}: kernels[{i}]: expected an object")
                if "best_label" not in k:
                    continue
                if not isinstance(k.get("name"), str) or not isinstance(k["best_label"], str):
                    raise UsageError(f"{where}: kernels[{i}]: name and best_label must be strings")
                pinned[k["name"]] = (f"{where}: kernels[{i}].best_label", k["best_label"])
        else:
            for name, choice in doc.items():
                pinned[name] = (f"{where}: key {name!r}", choice)
    for item in args.config:
        name, sep, label = item.partition("=")
        if not sep or not name or not label:
            raise UsageError(f"--config {item!r}: expected KERNEL=LABEL (labels as in bench.json, e.g. w8,s1)")
        pinned[name] = (f"--config {item!r}", label)
    if not pinned:
        return {}
    specs = dict(SUITE)
    for ref in args.spec:
        spec = load_spec(ref, small=args.small, python_path=[os.getcwd()])
        specs[spec.name] = ref
    for name, (where, choice) in pinned.items():
        if name not in specs:
            raise UsageError(f"{where}: {name!r} is not a suite kernel or the name of a --spec")
        run = (args.kernels or ([] if args.spec else list(SUITE))) + [n for n, r in specs.items() if r in args.spec]
        if where.startswith("--config") and name not in run:
            raise UsageError(f"{where}: {name!r} is not one of the kernels this run benchmarks")
        resolve_config(load_spec(specs[name], small=args.small, python_path=[os.getcwd()]), choice, where=where)
    return {name: choice for name, (_, choice) in pinned.items()}


def recorded_specs(args: argparse.Namespace) -> list[Any]:
    """``--recording``'s verdicts (:func:`kbuild.bench.recorded.verdicts`, one per kernel); bad files are a
    UsageError naming them."""
    from kbuild.bench.recorded import verdicts
    from kbuild.record.capture import captures_dir
    from kbuild.record.capture import load as load_captures
    from kbuild.record.format import load

    if args.captures is not None and not (args.captures / "index.json").exists():
        raise UsageError(f"--captures {args.captures}: no index.json there (made by kbuild record --capture N)")
    recording = load(str(args.recording))
    captures = load_captures(args.captures if args.captures is not None else captures_dir(args.recording))
    return verdicts(recording, captures=captures, small=args.small)


def handler(args: argparse.Namespace) -> int:
    from kbuild import console

    if args.captures is not None and args.recording is None:
        raise UsageError("--captures belongs to --recording FILE")
    recorded = recorded_specs(args) if args.recording is not None else []
    if args.list and args.recording is not None:
        if args.json:
            console.emit_json({"recording": str(args.recording), "kernels": [v.as_json() for v in recorded]})
        else:
            console.print_table(f"kbuild bench --recording {args.recording}", ["kernel", "specialisation", "spec",
                                                                                "why"],
                                [[v.function, v.specialization, v.status, v.reason] for v in recorded])
        return 0
    if recorded:
        from kbuild.bench.recorded import recorded_ref

        for v in recorded:
            if v.status == "refused":
                console.warn(f"{v.function}: not benchmarked: {v.reason}")
            else:
                args.spec.append(recorded_ref(args.recording, v.function, v.specialization,
                                              captures=args.captures))
    if args.list:
        rows = [[name, ref] for name, ref in SUITE.items()]
        if args.json:
            console.emit_json({"kernels": SUITE})
        else:
            console.print_table("kbuild bench suite", ["kernel", "spec"], rows)
        return 0
    unknown = [k for k in args.kernels if k not in SUITE]
    if unknown:
        import difflib

        hints = {k: difflib.get_close_matches(k, list(SUITE), n=1) for k in unknown}
        msg = ", ".join(f"{k!r}" + (f" (did you mean {h[0]!r}?)" if h else "") for k, h in hints.items())
        raise UsageError(f"unknown suite kernel {msg}; `kbuild bench --list` shows them")
    if args.rounds < 2 or args.reps < 1 or args.autotune_reps < 1:
        raise UsageError("--rounds must be at least 2, --reps and --autotune-reps at least 1")
    names = list(args.kernels) or ([] if args.spec else list(SUITE))
    pinned = pinned_configs(args)  # bad pins are exit 2 before the GPU is looked for

    from kbuild.bench.spec import suite_archs
    from kbuild.device.timing import require_gpu

    require_gpu(suite_archs())  # a clear exit 2 before anything else when there is no GPU

    from kbuild.bench import report as rep
    from kbuild.bench.runner import BenchOptions, run_suite

    opts = BenchOptions(small=args.small, rounds=args.rounds, reps=args.reps, autotune_reps=args.autotune_reps,
                        peers=args.peers, pinned=pinned)
    total = len(names) + len(args.spec) + 1
    started = time.time()
    out: Path = args.out

    def partial(report: dict[str, Any]) -> None:  # a record survives a run cut short
        rep.write_json({**report, "partial": True, "command": sys.argv}, out / "bench.partial.json")

    with console.progress("bench", total) as advance:
        result = run_suite(names, opts, extra_specs=args.spec, python_path=[os.getcwd()], advance=advance,
                           on_result=partial)
    result["command"] = sys.argv
    result["started_unix"] = started
    rep.write_json(result, out / "bench.json")
    (out / "bench.partial.json").unlink(missing_ok=True)
    rep.write_atomic(out / "bench.md", (rep.ceiling_line(result) + "\n\n" + rep.markdown_table(result)).encode())
    chart = False if args.no_chart else rep.write_chart(result, out / "bench.png")
    if args.json:
        console.emit_json(result)
    console.info(rep.ceiling_line(result))
    console.print_table(f"kbuild bench ({result['elapsed_s']} s)", rep.COLUMNS, rep.rows(result))
    if peer_rows := rep.peer_rows(result):
        console.print_table("peers, same run (peer/kernel > 1: the kernel is faster)", rep.PEER_COLUMNS, peer_rows)
    console.info(f"wrote {out / 'bench.json'}" + (f", {out / 'bench.png'}" if chart else "") + f", {out / 'bench.md'}")
    return ExitCode.FAILED if any("error" in k for k in result["kernels"]) else ExitCode.OK


def main(argv: list[str] | None = None) -> int:
    """``python -m kbuild.bench``: the same as ``kbuild bench`` without the rest of the CLI."""
    import logging
    import traceback

    from kbuild.errors import KBuildError

    parser = argparse.ArgumentParser(prog="python -m kbuild.bench")
    parser.add_argument("--debug", action="store_true")
    configure(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING, format="%(name)s: %(message)s")
    try:
        return handler(args)
    except KBuildError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
