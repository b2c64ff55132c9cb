"""The parent side of ``kbuild record``: run the command with the recorder in every Python process it starts, then
merge what they recorded.

How the recorder gets into the command without changing it: a temporary directory holding only a
``sitecustomize.py`` is put first on the command's ``PYTHONPATH``. Python imports ``sitecustomize`` at start-up
(``site``), in the command itself and in every Python process it starts with that environment (pytest-xdist
workers, ``multiprocessing`` spawn children, subprocesses). That module:

1. runs the ``sitecustomize`` it shadows, if there is one (a distribution's or a virtualenv's), as Python would
   have, and takes its own directory off ``sys.path`` again (``PYTHONPATH`` keeps it for child processes);
2. waits for ``triton`` to be imported (a finder on ``sys.meta_path`` that wraps the ``exec_module`` of
   ``triton``'s own loader once), then calls :func:`kbuild.record.child.install`. A process that never imports
   Triton loads nothing of kbuild.

Each process appends what it recorded to its own part file in the session's directory, as it goes and when it
ends (:class:`kbuild.record.recorder.Recorder`); :func:`run` merges every line of them (the order does not matter:
:mod:`kbuild.record.format`) and removes the directory. With ``--capture`` the processes also write captured
tensors into the session's staging folder, and :func:`run` keeps the first of them beside the recording
(:mod:`kbuild.record.capture`) before the directory goes. A Python started with ``-I``, ``-E``
or ``-S`` ignores ``PYTHONPATH`` or ``site`` and is not recorded; a Python that cannot import kbuild leaves a note
that the parent reports.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbuild.arch import DEFAULT_SM
from kbuild.errors import UsageError
from kbuild.record.format import Recording, from_json, merge

#: The ``sitecustomize.py`` of a session (``{session!r}``, ``{site!r}``, ``{parts!r}`` filled in).
SITECUSTOMIZE = '''\
"""Written by `kbuild record` for the command it runs, and removed when it ends: records Triton launches."""


def _kbuild_record_start():
    import importlib
    import importlib.util
    import json
    import os
    import sys

    site_dir, session, parts = {site!r}, {session!r}, {parts!r}

    def note(message):
        try:
            path = os.path.join(parts, "note-%d-%s.jsonl" % (os.getpid(), os.urandom(4).hex()))
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps({{"notes": [message]}}) + "\\n")
        except OSError:
            pass

    def ours(entry):
        try:
            return os.path.samefile(entry or os.curdir, site_dir)
        except OSError:
            return False

    # 1. The sitecustomize this one shadows, run as Python would have run it.
    sys.path[:] = [p for p in sys.path if not ours(p)]
    this = sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ImportError as exc:
        if exc.name != "sitecustomize":
            print("Error in sitecustomize; set PYTHONVERBOSE for traceback:\\n%s: %s" % (type(exc).__name__, exc),
                  file=sys.stderr)
        if this is not None:
            sys.modules["sitecustomize"] = this
    except Exception as exc:
        print("Error in sitecustomize; set PYTHONVERBOSE for traceback:\\n%s: %s" % (type(exc).__name__, exc),
              file=sys.stderr)

    # 2. The recorder, once triton is imported.
    def start():
        try:
            from kbuild.record.child import install
        except ImportError as exc:
            note("%s could not import kbuild (%s): its launches were not recorded" % (sys.executable, exc))
            return
        try:
            install(session)
        except Exception as exc:
            note("the recorder did not start in %s: %s: %s" % (sys.executable, type(exc).__name__, exc))

    if "triton" in sys.modules:
        start()
        return

    class TritonWatch:
        def find_spec(self, name, path=None, target=None):
            if name != "triton":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            loader = getattr(spec, "loader", None)
            if loader is None or not hasattr(loader, "exec_module"):
                return spec
            original = loader.exec_module

            def exec_module(module):
                try:
                    original(module)
                finally:
                    try:
                        del loader.exec_module
                    except AttributeError:
                        pass
                start()

            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, TritonWatch())


_kbuild_record_start()
del _kbuild_record_start
'''


#: The largest part file read (one process's lines).
MAX_PART_BYTES = 1 << 30


@dataclass
class Outcome:
    """What one recorded run gave."""

    recording: Recording
    status: int
    """The command's exit status (negative: killed by that signal)."""
    processes: int
    """How many processes wrote a part file."""
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    captures: list[dict[str, Any]] = field(default_factory=list)
    """``--capture``: the captured calls the processes wrote (:mod:`kbuild.record.capture`)."""
    captured: dict[str, int] | None = None
    """``--capture``: what :func:`kbuild.record.capture.store` kept (calls, skipped, files written)."""


@dataclass(frozen=True)
class Options:
    mode: str
    """``"gpu"`` or ``"cpu"``."""
    targets: tuple[int, ...] = (DEFAULT_SM,)
    """``--mode cpu``: the compute capabilities each call is specialised for."""
    sm_count: int = 1
    """``--mode cpu``: the SM count the workload sees (samples carry it)."""
    samples: int = 8
    capture: int = 0
    """``--capture``: calls per specialisation whose integer and bool tensors are kept (0: none)."""
    capture_mib: int = 64
    """``--capture-mib``: the most a call's captured tensors may hold."""
    capture_to: str | None = None
    """``--capture``: the captures folder (:func:`kbuild.record.capture.captures_dir` of ``--out``)."""


def resolve_command(command: Sequence[str]) -> list[str]:
    """The command with its program found on ``PATH``; a :class:`UsageError` when there is none to run."""
    if not command:
        raise UsageError("no command given: kbuild record [options] -- COMMAND [ARGS...]")
    program = command[0]
    if os.sep in program or (os.altsep and os.altsep in program):
        if not os.path.isfile(program) or not os.access(program, os.X_OK):
            raise UsageError(f"cannot run {program!r}: not an executable file")
        return list(command)
    found = shutil.which(program)
    if found is None:
        raise UsageError(f"cannot run {program!r}: not found on PATH")
    return list(command)


def run(command: Sequence[str], options: Options, *, stdout_to_stderr: bool = False) -> Outcome:
    """Run ``command`` with the recorder in its Python processes; merge their part files."""
    argv = resolve_command(command)
    root = Path(tempfile.mkdtemp(prefix="kbuild-record-"))
    try:
        site, parts = root / "site", root / "parts"
        site.mkdir()
        parts.mkdir()
        session = root / "session.json"
        staging = root / "captures"
        staging.mkdir()
        session.write_text(json.dumps({"mode": options.mode, "targets": list(options.targets),
                                       "sm_count": options.sm_count, "samples": options.samples,
                                       "parts": str(parts), "capture": options.capture,
                                       "capture_mib": options.capture_mib, "captures": str(staging)}),
                           encoding="utf-8")
        (site / "sitecustomize.py").write_text(
            SITECUSTOMIZE.format(site=str(site), session=str(session), parts=str(parts)), encoding="utf-8")
        env = dict(os.environ)  # the command's environment: this one, with the recorder first on PYTHONPATH
        env["PYTHONPATH"] = os.pathsep.join([str(site), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
        start = time.monotonic()
        for stream in (sys.stdout, sys.stderr):  # what this process printed comes before the command's output
            stream.flush()
        try:
            proc = subprocess.Popen(argv, env=env, stdout=2 if stdout_to_stderr else None)
        except OSError as exc:
            raise UsageError(f"cannot run {argv[0]!r}: {exc.strerror or exc}") from None
        try:
            status = proc.wait()
        except KeyboardInterrupt:  # the command got the same SIGINT from the terminal: let it finish
            proc.wait()
            raise
        seconds = time.monotonic() - start
        outcome = collect(parts, options.samples, status=status, seconds=seconds)
        if options.capture and options.capture_to is not None:
            from kbuild.record.capture import store

            outcome.captured = store(options.capture_to, outcome.captures, staging, limit=options.capture,
                                     max_mib=options.capture_mib)
        return outcome
    finally:
        shutil.rmtree(root, ignore_errors=True)


def collect(parts: Path, samples: int, *, status: int, seconds: float) -> Outcome:
    """Merge every line of every part file in ``parts``. A line that cannot be read (a process killed while it
    wrote, the last line cut short) is a note, not an error."""
    from kbuild.fsutil import read_bounded
    from kbuild.jsonio import load_json

    recordings: list[Recording] = []
    notes: list[str] = []
    captures: list[dict[str, Any]] = []
    processes = 0
    for path in sorted(parts.iterdir()):
        if path.suffix != ".jsonl":
            continue
        try:
            lines = read_bounded(path, max_bytes=MAX_PART_BYTES).splitlines()
        except OSError as exc:
            notes.append(f"a process's recording could not be read: {path.name}: {exc.strerror or exc}")
            continue
        wrote = False
        for i, line in enumerate(lines):
            where = f"{path.name} line {i + 1}"
            try:
                doc = load_json(line, where=where)
                if not isinstance(doc, dict) or not isinstance(doc.get("notes", []), list):
                    raise UsageError(f"{where}: not a part of a recording")
                notes.extend(str(n) for n in doc.get("notes", []))
                captures.extend(c for c in doc.get("captures", []) if isinstance(c, dict) and "sample" in c)
                if "recording" in doc:
                    recordings.append(from_json(doc["recording"], where=where))
                    wrote = True
            except UsageError as exc:
                notes.append(f"a line of a process's recording could not be read (killed while writing?): {exc}")
        processes += wrote
    unique = list(dict.fromkeys(notes))
    return Outcome(merge(recordings, samples=samples), status, processes, unique, seconds, captures)


__all__ = ["SITECUSTOMIZE", "Options", "Outcome", "collect", "resolve_command", "run"]
