"""``kbuild record``: run a workload and record every Triton specialisation it launches.

::

    kbuild record [--out FILE] [--json] [--mode auto|gpu|cpu] [--target SM[,SM]] [--sm-count N] [--samples N]
                  [--capture N [--capture-mib M]] [--replace] -- COMMAND [ARGS...]
    kbuild record --merge RECORDING [RECORDING...] --out FILE [--json]

The command runs as it would (its own stdout and stderr; with ``--json`` its stdout goes to stderr so that stdout
holds one JSON document), with the recorder in every Python process it starts (:mod:`kbuild.record.session`).
``--mode gpu`` records through Triton's hooks while kernels run; ``--mode cpu`` records the launches of a
workload on CPU tensors instead of running them, specialised for each ``--target`` (default: the targets of
``./pyproject.toml``'s ``[tool.kbuild]``, else sm_90); ``auto`` (the default) is ``gpu`` on a machine with a GPU.
An existing ``--out`` file is added to (``--replace`` starts it afresh); the file is written once, whole, at the
end. ``--capture N`` also keeps the integer and bool tensor arguments (labels, indices, offsets, masks) of up to
``N`` calls per specialisation, at most ``--capture-mib`` (64) MiB a call, in the folder beside ``--out`` named
like it with ``.captures`` for its suffix (:mod:`kbuild.record.capture`): what tuning from a recording replays where
generated values would not do (:mod:`kbuild.bench.recorded`). Exit status: 0; 1 when the command failed (the recording still holds what it launched); 2 for bad input (no
command, a command that cannot run, an unwritable ``--out``, a file that is not a recording).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from kbuild.console import emit_json, info, print_table, warn

#: The recording written when no ``--out`` is given.
DEFAULT_OUT = "kbuild-recording.json"
_MODES = ("auto", "gpu", "cpu")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("record", help="run a workload and record the Triton specialisations it launches",
                       description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--out", "-o", metavar="FILE", default=None,
                   help=f"the recording to write (default: {DEFAULT_OUT}); an existing one is added to")
    p.add_argument("--replace", action="store_true", help="start --out afresh instead of adding to it")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout (the command's stdout "
                                                       "goes to stderr)")
    p.add_argument("--mode", choices=_MODES, default="auto",
                   help="gpu: through Triton's hooks while kernels run; cpu: launches on CPU tensors recorded "
                        "instead of run; auto: gpu when this machine has a GPU")
    p.add_argument("--target", action="append", metavar="SM[,SM...]",
                   help="--mode cpu: the targets each call is specialised for (default: the project's, else sm_90)")
    p.add_argument("--sm-count", metavar="N", help="--mode cpu: the SM count the workload sees (default 1)")
    p.add_argument("--samples", metavar="N", help="distinct calls kept per specialisation (default 8, or the "
                                                  "existing recording's)")
    p.add_argument("--capture", metavar="N", help="keep the integer and bool tensor arguments of up to N calls per "
                                                  "specialisation beside --out (FILE.captures/; default 0: none)")
    p.add_argument("--capture-mib", metavar="M", help="--capture: the most one call's captured tensors may hold "
                                                      "(MiB, default 64; a larger call is listed as skipped)")
    p.add_argument("--merge", nargs="+", metavar="RECORDING", help="merge these recordings into --out (no command)")
    p.add_argument("workload", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]",
                   help="the workload to run (after --)")
    p.set_defaults(func=run)


def _count(raw: str | None, flag: str, *, default: int | None, most: int) -> int | None:
    from kbuild.errors import UsageError

    if raw is None:
        return default
    try:
        value = int(raw, 10)
    except ValueError:
        raise UsageError(f"{flag} {raw!r}: expected a whole number from 1 to {most:,}") from None
    if not 1 <= value <= most:
        raise UsageError(f"{flag} {raw!r}: expected a whole number from 1 to {most:,}")
    return value


def _targets(raw: list[str] | None) -> list[int]:
    from kbuild.errors import UsageError
    from kbuild.targets import parse_target

    if raw:
        names = [t.strip() for item in raw for t in item.split(",") if t.strip()]
        if not names:
            raise UsageError("--target: no target named; give e.g. sm_90 or sm_80,sm_90")
        ccs: list[int] = []
        for name in names:
            try:
                cc = parse_target(name).cc
            except ValueError as exc:
                raise UsageError(f"--target: {exc}") from None
            if cc not in ccs:
                ccs.append(cc)
        return ccs
    from kbuild.arch import DEFAULT_SM

    return _project_targets() or [DEFAULT_SM]


def _project_targets() -> list[int] | None:
    """The targets of ``./pyproject.toml``'s ``[tool.kbuild]`` (None: no such file or table)."""
    import tomllib

    from kbuild.fsutil import read_bounded
    from kbuild.settings.sources import load_settings

    path = Path("pyproject.toml")
    try:
        data = tomllib.loads(read_bounded(path, max_bytes=4 * 2**20).decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data.get("tool"), dict) or "kbuild" not in data["tool"]:
        return None
    return [t.cc for t in load_settings(path).parsed_targets] or None


def _mode(requested: str) -> str:
    from kbuild.device.probe import local_gpus
    from kbuild.errors import UsageError

    if requested == "cpu":
        return "cpu"
    if local_gpus():
        return "gpu"
    if requested == "gpu":
        raise UsageError("--mode gpu: this machine has no GPU the CUDA driver reports; --mode cpu records a "
                         "workload on CPU tensors")
    return "cpu"


def run(args: argparse.Namespace) -> int:
    from kbuild.errors import ExitCode, UsageError
    from kbuild.fsutil import check_output_file, write_atomic
    from kbuild.record import format as fmt

    command = list(args.workload)
    if command[:1] == ["--"]:
        command = command[1:]
    out = Path(args.out if args.out is not None else DEFAULT_OUT)
    check_output_file(out, "--out")  # every argument before any work
    samples = _count(args.samples, "--samples", default=None, most=10_000)
    sm_count = _count(args.sm_count, "--sm-count", default=1, most=100_000)
    capture = _count(args.capture, "--capture", default=0, most=1_000) if args.capture != "0" else 0
    capture_mib = _count(args.capture_mib, "--capture-mib", default=64, most=1 << 20)
    if args.capture_mib is not None and not capture:
        raise UsageError("--capture-mib sets the bound of --capture N: give --capture too")
    given_targets = _targets(args.target) if args.target else None
    if args.merge:
        if command:
            raise UsageError("--merge takes recordings, not a command: kbuild record --merge A B --out C")
        if capture:
            raise UsageError("--capture records a command's calls; --merge merges recordings (their .captures "
                             "folders are not merged)")
        if args.out is None:
            raise UsageError("--merge needs --out FILE: the merged recording")
        merged = fmt.merge([fmt.load(p) for p in args.merge], samples=samples)
        write_atomic(out, fmt.dumps(merged))
        _report(args, out, merged, None)
        return 0

    from kbuild.record import session

    session.resolve_command(command)
    mode = _mode(args.mode)
    if mode == "gpu" and (args.target or args.sm_count is not None):
        flag = "--target" if args.target else "--sm-count"
        raise UsageError(f"{flag} is for --mode cpu: a GPU run records the device's own architecture and SM count")
    targets: list[int] = (given_targets or _targets(None)) if mode == "cpu" else []
    existing = None
    if not args.replace and out.exists():
        try:
            existing = fmt.load(str(out))
        except UsageError as exc:
            raise UsageError(f"--out {exc}; --replace starts a new recording") from None
    limit = samples or (existing.samples_per_specialization if existing else fmt.DEFAULT_SAMPLES)
    from kbuild.targets import Target

    where = f"targets {', '.join(Target(cc).name for cc in targets)}" if mode == "cpu" else "this GPU"
    info(f"kbuild record: {mode} mode ({where}): {shlex.join(command)}")
    captures = None
    if capture:
        from kbuild.fsutil import check_output_dir
        from kbuild.record.capture import captures_dir

        captures = check_output_dir(captures_dir(out), "--capture (the captures folder beside --out)")
    outcome = session.run(command, session.Options(mode=mode, targets=tuple(targets), sm_count=sm_count or 1,
                                                   samples=limit, capture=capture or 0, capture_mib=capture_mib or 64,
                                                   capture_to=str(captures) if captures else None),
                          stdout_to_stderr=args.json)
    merged = fmt.merge([*([existing] if existing else []), outcome.recording], samples=limit)
    write_atomic(out, fmt.dumps(merged))
    for note in outcome.notes:
        warn(note)
    if not outcome.recording.kernels:
        warn("no Triton launch was recorded: did the command run Python code that launches Triton kernels "
             "(a Python started with -I, -E or -S does not load the recorder)?")
    if outcome.status != 0:
        warn(f"the command exited with status {outcome.status}; {out} holds what it launched")
    _report(args, out, merged, outcome)
    return 0 if outcome.status == 0 else int(ExitCode.FAILED)


def _report(args: argparse.Namespace, out: Path, recording: Any, outcome: Any) -> None:
    summary = recording.summary()
    if args.json:
        doc: dict[str, Any] = {"out": str(out), **summary}
        if outcome is not None:
            this = outcome.recording.summary()
            doc["run"] = {"status": outcome.status, "processes": outcome.processes,
                          "seconds": round(outcome.seconds, 3), "notes": outcome.notes,
                          "kernels": this["kernels"], "specializations": this["specializations"],
                          "calls": this["calls"]}
            if outcome.captured is not None:
                from kbuild.record.capture import captures_dir

                doc["captures"] = {"folder": str(captures_dir(out)), **outcome.captured}
        emit_json(doc)
        return
    rows = [(r["function"], r["distribution"] or "", r["specializations"], r["calls"], ",".join(r["targets"]),
             "yes" if r["autotuned"] else "", ", ".join(r["sm_dependent"])) for r in summary["per_kernel"]]
    print_table(f"kbuild record — {out}: {summary['kernels']} kernels, {summary['specializations']} "
                f"specialisations, {summary['calls']} calls",
                ["kernel", "from", "specialisations", "calls", "targets", "autotuned", "SM-dependent"], rows)
    if outcome is not None:
        this = outcome.recording.summary()
        info(f"this run: {this['specializations']} specialisations of {this['kernels']} kernels, {this['calls']} "
             f"calls, from {outcome.processes} process(es) in {outcome.seconds:.1f} s")
        if outcome.captured is not None:
            from kbuild.record.capture import captures_dir

            c = outcome.captured
            info(f"captures: {c['calls']} call(s) kept in {captures_dir(out)} ({c['skipped']} skipped for size)")
