"""Sweep every verb and option of the ``kbuild`` CLI with garbage values; count tracebacks and unclean errors.

    python benchmarks/cli_sweep.py [--out benchmarks/results/cli_sweep.json] [--verbs VERB,...] [--values NAME,...]
                                   [--timeout S] [--no-tile-fuzz]

The verbs and options are read from the argparse parser (:func:`kbuild.cli.build_parser`, sub-parsers walked
recursively), so a new option is swept without a change here. Each run starts from a verb's *base* command line,
which works in a fresh sandbox (a one-kernel Triton project, a warm store, a wheel, a bundle, a cubin; the
verb's required arguments get working values by their metavar or destination, :data:`VALID`, plus the few
arguments a verb needs to reach its work, :data:`CONTEXT`), and gives one option one value of :data:`GARBAGE`
(``/dev/zero``, a FIFO, a directory, a 4,000-character name, ``nan``, ``2**40``, ...). A flag is given once.
Ray's options (``--ray``, ``--ray-resources``: another part of issue 32) are given only local-safe values.

A run *holds* when

* its exit status is one of :class:`kbuild.errors.ExitCode` (or 130/141, an interrupt or a closed pipe);
* stderr holds no Python traceback;
* an error status (2, 3, 4, 5, 8; 1, 6 and 7 are answers) comes with exactly one ``error:`` line (argparse's
  ``kbuild …: error:`` counts);
* with ``--json`` and status 0, stdout is one JSON document;
* nothing is half-written: no temporary file is left in the sandbox, and an error status leaves the sandbox
  as it was (diskcache writes its database when it opens a store: bad input must fail before the store opens);
* it ends within ``--timeout`` seconds (a FIFO opened for reading blocks forever).

Runs are forked from one process that has imported kbuild and Triton already (each child exits as the console
script does: a ``SystemExit`` gives its code, an escaping exception prints its traceback and exits 1), with an
address-space limit so that reading ``/dev/zero`` fails fast instead of filling the machine's memory.

The JSON (``--out``) has the counts: verbs, options, runs, runs that held, tracebacks by exception type,
problems by kind, exit statuses, each verb's base run, and every run that did not hold (argv and stderr's tail);
with the tile fuzz (``benchmarks/tile_fuzz.py``), its counts under ``tile_fuzz``.
"""

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import re
import resource
import select
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: Garbage values: name → text, where ``{sb}`` is the run's sandbox. Files where a directory is expected and
#: directories where a file is expected are both here: every option gets every value. ``/dev/zero`` is given
#: through a link in the sandbox: reading it reads the device, and a command that replaces its output file
#: (``kbuild cache get KEY -o /dev/zero`` did, as root, before issue 32) replaces the link, not the machine's device.
GARBAGE: dict[str, str] = {
    "dev-zero": "{sb}/zero",
    "fifo": "{sb}/fifo",
    "directory": "{sb}/adir",
    "long-name": "n" * 4000,
    "missing": "{sb}/no/such/path",
    "empty": "",
    "minus-one": "-1",
    "nan": "nan",
    "inf": "inf",
    "2**40": str(2**40),
    "unicode": "ünï☃\u202e.x",
    "undecodable": "\udcff\udcfe.x",  # bytes ff fe in argv, as Python's surrogateescape hands them over
    "file": "{sb}/afile",  # a regular file where a directory (or another kind of file) is expected
    "under-a-file": "{sb}/afile/sub",
    "garbage-file": "{sb}/garbage.bin",
    "symlink-loop": "{sb}/loop",
}

#: Working values of required arguments, looked up by ``verb dest``, then ``dest``, then metavar.
VALID: dict[str, str] = {
    "PYPROJECT": "{sb}/project/pyproject.toml",
    "KERNEL": "add",
    "SM": "sm_90",
    "WHEEL": "{sb}/fixtures/sweepkit-0.1-py3-none-any.whl",
    "KEY": "{key}",
    "key": "{key}",
    "MODULE:FUNCTION": "kbuild.tile.kernels:softmax_tile",
    "PACKAGE_DIR": "{sb}/project/sweepkit",
    "cache export file": "{sb}/out.tar",
    "cache import file": "{sb}/fixtures/bundle.tar",
    "cache put cubin": "{sb}/fixtures/add.cubin",
    "cubin": "{sb}/fixtures/add.cubin",
    "original": "{sb}/fixtures/add.cubin",
    "rewritten": "{sb}/fixtures/add.cubin",
}

#: Arguments a verb needs to reach its work besides its required ones (an option swept replaces its own here).
CONTEXT: dict[str, list[str]] = {
    "emit": ["--out-dir", "{sb}/emitted"],
    "tile": ["--block", "N=64", "--warps", "4"],
    "tune": ["add", "--backend", "model", "--budget-evals", "2", "--budget-seconds", "2", "--levels", "sass",
             "--target", "sm_90"],
    "sass verify": ["--no-disassemble"],
    "sass fuzz": ["--sequences", "2", "--max-depth", "2", "--full-checks", "0"],
}

#: :data:`CONTEXT` of the sample (``--sample``, CI): ``tune`` on the GPU backend checks every argument and then
#: stops (no GPU), instead of a search on the cost model in every run.
SAMPLE_CONTEXT: dict[str, list[str]] = {
    "tune": ["add", "--backend", "gpu", "--budget-evals", "2", "--budget-seconds", "2", "--levels", "sass",
             "--target", "sm_90"],
}

#: Options of another part of issue 32 (Ray) and the values they may be given here: local-safe only.
LOCAL_ONLY: dict[str, list[str]] = {"--ray": [], "--ray-resources": [], "--lease-seconds": ["nan", "inf", "-1"]}
#: Verbs whose flags, given to a working base, do the verb's slow work (``verify-wheel`` rebuilds the wheel with
#: pip): the sample of :func:`plan` leaves them out; the full sweep gives them.
SLOW_FLAGS = {"verify-wheel"}
#: Top-level options that only print and exit.
SKIP = {"-h", "--help", "--version"}

#: Exit statuses a run may end with: kbuild's own (:class:`kbuild.errors.ExitCode`), an interrupt, a closed pipe.
DOCUMENTED = {0, 1, 2, 3, 4, 5, 6, 7, 8, 130, 141}
#: The statuses of an error (one ``error:`` line, nothing written); 1, 6 and 7 are a command's answers (a miss,
#: a rebuilt wheel that differs, a rewrite the verifier rejects), printed as such.
ERRORS = {2, 3, 4, 5, 8}

KERNEL_SOURCE = '''\
import triton
import triton.language as tl


@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)
'''

PYPROJECT = '''\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "sweepkit"
version = "0.1"

[tool.kbuild]
targets = ["sm_90"]
tune = "auto"

[[tool.kbuild.kernels]]
name = "add"
source = "sweepkit.kernels:add"
signature = { x_ptr = "*fp32:16", y_ptr = "*fp32:16", out_ptr = "*fp32:16", n = "i32" }
constexprs = { BLOCK = 256 }
num_warps = 4
'''


@dataclasses.dataclass(frozen=True)
class Option:
    """One argument of one verb, as argparse declares it."""

    verb: str
    name: str
    """the first option string (``--config``), or the destination of a positional (``wheel``)"""
    kind: str
    """``flag`` (takes no value), ``value``, ``positional`` or ``remainder``"""
    required: bool
    dest: str
    metavar: str | None
    choices: tuple[str, ...] | None


@dataclasses.dataclass
class Run:
    verb: str
    option: str
    value: str
    argv: list[str]


@dataclasses.dataclass
class Result:
    run: Run
    code: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool
    wrote: list[str]
    problems: list[str]
    exception: str | None


# ----------------------------------------------------------------------------------------------
# What to run

def discover(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[str, list[Option]]:
    """Verb (``"cache put"``) → its options, walking every sub-parser; the top level is the verb ``""``."""
    verbs: dict[str, list[Option]] = {}
    own: list[Option] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                verbs.update(discover(sub, (*path, name)))
            continue
        if action.option_strings and set(action.option_strings) & SKIP:
            continue
        if action.option_strings:
            kind = "flag" if action.nargs == 0 else "value"
            name = max(action.option_strings, key=len) if len(action.option_strings) > 1 else action.option_strings[0]
            name = next((s for s in action.option_strings if s.startswith("--")), name)
        else:
            kind = "remainder" if action.nargs == argparse.REMAINDER else "positional"
            name = action.dest
        metavar = action.metavar if isinstance(action.metavar, str) else None
        required = action.nargs not in ("?", "*") if kind == "positional" else kind != "remainder" and action.required
        own.append(Option(" ".join(path), name, kind, required, action.dest, metavar,
                          tuple(map(str, action.choices)) if action.choices else None))
    if own and (path == () or not any(v.startswith(" ".join(path) + " ") for v in verbs)):
        verbs[" ".join(path)] = own
    return verbs


def _valid(opt: Option) -> str:
    for k in (f"{opt.verb} {opt.dest}", opt.dest, opt.metavar or ""):
        if k in VALID:
            return VALID[k]
    if opt.choices:
        return opt.choices[0]
    return "x"


def base_argv(verb: str, options: list[Option], *, without: str | None = None,
              contexts: dict[str, list[str]] = CONTEXT) -> list[str]:
    """The verb's working command line (templates unresolved), leaving out the option ``without``."""
    argv = verb.split() if verb else []
    context = _drop(contexts.get(verb, []), without, options)
    flags: list[str] = []
    positionals: list[str] = []
    for opt in options:
        if opt.name == without or not opt.required:
            continue
        if opt.kind == "positional":
            positionals.append(_valid(opt))
        elif opt.name not in context:
            flags += [opt.name, _valid(opt)]
    return [*argv, *positionals, *flags, *context]


def _drop(context: list[str], name: str | None, options: list[Option]) -> list[str]:
    """``context`` without the option ``name`` and its value (and, for a positional ``name``, without the
    context's positional values: ``tune``'s KERNEL)."""
    if name is None:
        return list(context)
    takes_value = {o.name for o in options if o.kind == "value"}
    positional = any(o.name == name and o.kind == "positional" for o in options)
    out: list[str] = []
    i = 0
    while i < len(context):
        a = context[i]
        if a == name:
            i += 2 if a in takes_value else 1
            continue
        if a.startswith("-"):
            out.append(a)
            if a in takes_value and i + 1 < len(context):
                out.append(context[i + 1])
                i += 1
        elif not positional:
            out.append(a)
        i += 1
    return out


def plan(verbs: dict[str, list[Option]], values: dict[str, str], *, sample: bool = False,
         contexts: dict[str, list[str]] = CONTEXT) -> Iterator[Run]:
    """Every run: each value-taking option or positional with each garbage value, each flag once. ``sample``:
    each option with one value only, the next one for the next option (a bounded run for CI)."""
    turn = 0
    for verb, options in sorted(verbs.items()):
        for opt in options:
            allowed = LOCAL_ONLY.get(opt.name)
            if opt.kind == "flag":
                if allowed is None and not (sample and verb in SLOW_FLAGS):
                    yield Run(verb, opt.name, "flag", [*base_argv(verb, options, contexts=contexts), opt.name])
                continue
            names = [n for n in values if allowed is None or n in allowed]
            if sample and names:
                names = [names[turn % len(names)]]
                turn += 1
            for vname in names:
                text = values[vname]
                base = base_argv(verb, options, without=opt.name, contexts=contexts)
                if opt.kind in ("positional", "remainder"):
                    argv = _insert_positional(verb, base, options, opt, text)
                else:
                    argv = [*base, f"{opt.name}={text}" if text.startswith("-") else opt.name,
                            *([] if text.startswith("-") else [text])]
                yield Run(verb, opt.name, vname, argv)


def _insert_positional(verb: str, base: list[str], options: list[Option], opt: Option, text: str) -> list[str]:
    """``base`` with ``text`` as the positional ``opt``: in its place among the required positionals (which
    come first after the verb in a base), after them for an optional one, last for a remainder."""
    if opt.kind == "remainder":
        return [*base, text]
    required = [o for o in options if o.kind == "positional" and o.required]
    at = (len(verb.split()) if verb else 0) + (required.index(opt) if opt in required else len(required))
    return [*base[:at], text, *base[at:]]


# ----------------------------------------------------------------------------------------------
# The sandbox

def prepare(root: Path) -> dict[str, str]:
    """A template sandbox under ``root/template`` (project, warm store, fixtures), built with the real CLI in
    subprocesses (this process forks the runs and must start no threads). Returns the template's facts."""
    tpl = root / "template"
    project = tpl / "project"
    pkg = project / "sweepkit"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "kernels.py").write_text(KERNEL_SOURCE)
    (project / "pyproject.toml").write_text(PYPROJECT)
    fixtures = tpl / "fixtures"
    fixtures.mkdir()
    (tpl / "adir").mkdir()
    (tpl / "afile").write_text("not what you expected\n")
    (tpl / "garbage.bin").write_bytes(bytes(range(256)) * 16)
    os.symlink("loop", tpl / "loop")
    os.symlink("/dev/zero", tpl / "zero")
    env = _env(tpl, root)

    def kbuild(*argv: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "kbuild", *argv], cwd=project, env=env, capture_output=True,
                              text=True, check=False, timeout=600)
        if proc.returncode != 0:
            raise SystemExit(f"preparing the sandbox: kbuild {shlex.join(argv)} exited {proc.returncode}:\n"
                             f"{proc.stderr}")
        return proc.stdout

    (row,) = json.loads(kbuild("compile", "--json", "--no-progress"))
    key = row["key"]
    kbuild("cache", "get", key, "-o", str(fixtures / "add.cubin"))
    kbuild("cache", "export", str(fixtures / "bundle.tar"))
    emitted = root / "emitted"
    kbuild("emit", "--out-dir", str(emitted))
    with zipfile.ZipFile(fixtures / "sweepkit-0.1-py3-none-any.whl", "w") as zf:
        zf.writestr("sweepkit/__init__.py", "")
        zf.write(emitted / "kbuild.json", "sweepkit-0.1.dist-info/kbuild.json")
        zf.writestr("sweepkit-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: sweepkit\nVersion: 0.1\n")
        zf.writestr("sweepkit-0.1.dist-info/RECORD", "")
    return {"key": key}


def _env(sb: Path, root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBUILD_")}
    env.update({"KBUILD_STORE": str(sb / "store"), "XDG_CACHE_HOME": str(sb / "xdg"),
                "TRITON_CACHE_DIR": str(root / "triton"), "PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1",
                "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)})
    return env


def make_sandbox(root: Path, n: int) -> Path:
    sb = root / f"run{n}"
    shutil.copytree(root / "template", sb, symlinks=True)
    os.mkfifo(sb / "fifo")
    return sb


def snapshot(sb: Path) -> dict[str, tuple[int, int]]:
    """Relative path → (size, mtime) of everything under the sandbox (not following links)."""
    out: dict[str, tuple[int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(sb):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[os.path.relpath(p, sb)] = (st.st_size if not os.path.isdir(p) else 0, st.st_mtime_ns)
    return out


# ----------------------------------------------------------------------------------------------
# Running one

def run_one(run: Run, root: Path, n: int, facts: dict[str, str], *, timeout: float,
            memory_bytes: int) -> Result:
    sb = make_sandbox(root, n)
    argv = [a.replace("{sb}", str(sb)).replace("{key}", facts["key"]) for a in run.argv]
    before = snapshot(sb)
    out_path, err_path = root / f"run{n}.out", root / f"run{n}.err"
    start = time.monotonic()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: the console script, in a sandbox
        _child(argv, sb, root, out_path, err_path, memory_bytes)
    code, timed_out = _wait(pid, timeout)
    seconds = time.monotonic() - start
    stdout = out_path.read_text(errors="replace")
    stderr = err_path.read_text(errors="replace")
    after = snapshot(sb)
    wrote = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p)
                   and not (p in before and p in after and os.path.isdir(sb / p)))
    result = Result(dataclasses.replace(run, argv=argv), code, stdout, stderr, seconds, timed_out, wrote, [], None)
    judge(result)
    for device in ("/dev/zero", "/dev/null"):  # a sweep must never damage the machine it runs on
        if not stat.S_ISCHR(os.stat(device).st_mode):
            raise SystemExit(f"{device} is no longer a device after kbuild {shlex.join(argv)}; stopped")
    shutil.rmtree(sb, ignore_errors=True)
    out_path.unlink()
    err_path.unlink()
    return result


def _child(argv: list[str], sb: Path, root: Path, out_path: Path, err_path: Path, memory_bytes: int) -> None:
    code = 1
    try:
        os.setsid()
        fd_out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        fd_err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd_out, 1)
        os.dup2(fd_err, 2)
        # the streams a console script starts with (a parent such as pytest may have replaced them)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.chdir(sb / "project")
        os.environ.clear()
        os.environ.update(_env(sb, root))
        sys.dont_write_bytecode = True
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        sys.argv = ["kbuild", *argv]
        from kbuild.cli import main

        try:
            status = main(argv)
            raise SystemExit(status)
        except SystemExit as exc:  # what the interpreter does with it
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:  # what the interpreter does with an escaping exception
            import traceback

            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # a closed or full stream: the status still counts
            pass
        os._exit(code & 0xFF)


def _wait(pid: int, timeout: float) -> tuple[int | None, bool]:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), False
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return None, True
        select.select([], [], [], 0.02)


_TRACEBACK = "Traceback (most recent call last):"
_ERROR_LINE = re.compile(r"^(?:error: |kbuild[\w -]*: error: )")


def exception_of(stderr: str) -> str | None:
    """The type of the last exception a traceback in ``stderr`` reports (``MemoryError``), or None."""
    if _TRACEBACK not in stderr:
        return None
    tail = stderr[stderr.rindex(_TRACEBACK):].splitlines()
    for line in tail[1:]:
        if not line.startswith(" "):
            m = re.match(r"([A-Za-z_][\w.]*)(?::|$)", line)
            if m:
                return m.group(1).rsplit(".", 1)[-1]
    return "unknown"


def judge(r: Result) -> None:
    """Fill ``r.problems`` (empty: the run held) and ``r.exception``."""
    if r.timed_out:
        r.problems.append("hang")
        return
    assert r.code is not None
    if r.code < 0:
        r.problems.append(f"killed by signal {-r.code}")
    elif r.code not in DOCUMENTED:
        r.problems.append(f"undocumented exit status {r.code}")
    r.exception = exception_of(r.stderr)
    if r.exception is not None:
        r.problems.append("traceback")
    errors = [line for line in r.stderr.splitlines() if _ERROR_LINE.match(line)]
    failed = r.code in ERRORS
    if failed and r.exception is None and len(errors) != 1:
        r.problems.append(f"{len(errors)} error lines")
    if r.code == 0 and "--json" in r.run.argv:
        try:
            json.loads(r.stdout)
        except ValueError:
            r.problems.append("--json without one JSON document on stdout")
    temps = [p for p in r.wrote if re.search(r"(^|/)\.[^/]*\.tmp$|\.kbuild-probe-|(^|/)tmp[\w]{6,}$", p)]
    if temps:
        r.problems.append("temporary files left")
    if failed and r.wrote and not temps:
        r.problems.append("wrote despite the error")


# ----------------------------------------------------------------------------------------------
# The sweep

def sweep(*, verbs_wanted: Iterable[str] | None = None, values: dict[str, str] | None = None, timeout: float = 30.0,
          memory_bytes: int = 3 << 30, progress: bool = True, root: Path | None = None,
          sample: bool = False) -> dict[str, Any]:
    """Run the sweep and return its JSON document (counts, failures). ``sample``: each option with one garbage
    value (:func:`plan`), and no base run of :data:`SLOW_FLAGS`' verbs."""
    from kbuild.cli import build_parser

    parser = build_parser()
    # imported once here, not in every forked run (no threads are started by importing them)
    import triton.compiler  # noqa: F401

    import kbuild.build.pipeline
    import kbuild.tune.api  # noqa: F401
    with contextlib.suppress(ImportError):
        import torch  # noqa: F401 - kbuild bench looks for a GPU with it
    context = dict(CONTEXT, **SAMPLE_CONTEXT) if sample else CONTEXT

    all_verbs = discover(parser)
    wanted = set(verbs_wanted) if verbs_wanted else None
    verbs = {v: o for v, o in all_verbs.items() if wanted is None or v in wanted or v.split(" ")[0] in wanted}
    values = dict(GARBAGE if values is None else values)
    own_root = root is None
    root = Path(tempfile.mkdtemp(prefix="kbuild-sweep-")) if root is None else root
    start = time.monotonic()
    try:
        facts = prepare(root)
        results: list[Result] = []
        bases: dict[str, Any] = {}
        n = 0
        for verb, options in sorted(verbs.items()):
            if sample and verb in SLOW_FLAGS:
                continue
            n += 1
            base = run_one(Run(verb, "(base)", "valid", base_argv(verb, options, contexts=context)), root, n, facts,
                           timeout=timeout, memory_bytes=memory_bytes)
            bases[verb or "(top level)"] = {"argv": base.run.argv, "exit": base.code, "problems": base.problems,
                                            "seconds": round(base.seconds, 2),
                                            **({"stderr_tail": base.stderr[-300:]} if base.code else {})}
            if base.problems:
                results.append(base)
        runs = list(plan(verbs, values, sample=sample, contexts=context))
        for i, run in enumerate(runs):
            n += 1
            r = run_one(run, root, n, facts, timeout=timeout, memory_bytes=memory_bytes)
            results.append(r)
            if progress:
                mark = "ok" if not r.problems else ", ".join(r.problems) + (f" ({r.exception})" if r.exception else "")
                print(f"[{i + 1}/{len(runs)}] {r.code} {r.seconds:5.2f}s kbuild {shlex.join(run.argv)[:150]}: "
                      f"{mark}", file=sys.stderr, flush=True)
    finally:
        if own_root:
            shutil.rmtree(root, ignore_errors=True)
    swept = [r for r in results if r.run.option != "(base)"]
    failed = [r for r in results if r.problems]
    by_verb: dict[str, Counter[str]] = defaultdict(Counter)
    for r in swept:
        by_verb[r.run.verb or "(top level)"]["runs"] += 1
        by_verb[r.run.verb or "(top level)"]["held"] += not r.problems
    return {
        "command": "python benchmarks/cli_sweep.py",
        "python": platform.python_version(),
        "seconds": round(time.monotonic() - start, 1),
        "verbs": len(verbs),
        "options": sum(len(o) for o in verbs.values()),
        "values": list(values),
        "sample": sample,
        "runs": len(swept),
        "held": sum(1 for r in swept if not r.problems),
        "tracebacks": sum(1 for r in results if r.exception),
        "by_exception": dict(Counter(r.exception for r in results if r.exception).most_common()),
        "problems": dict(Counter(p for r in results for p in r.problems).most_common()),
        "exit_statuses": {str(k): v for k, v in sorted(Counter(r.code for r in swept).items(), key=lambda kv: str(kv))},
        "by_verb": {v: dict(c) for v, c in sorted(by_verb.items())},
        "bases": bases,
        "failures": [{"argv": r.run.argv, "option": r.run.option, "value": r.run.value, "exit": r.code,
                      "problems": r.problems, "exception": r.exception,
                      "stderr_tail": r.stderr[-600:], "wrote": r.wrote[:10]} for r in failed],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "cli_sweep.json"))
    ap.add_argument("--verbs", help="comma-separated verbs to sweep (default: all; `cache` means its sub-verbs)")
    ap.add_argument("--values", help=f"comma-separated garbage values (default: all: {', '.join(GARBAGE)})")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds a run may take before it counts as a hang")
    ap.add_argument("--sample", action="store_true", help="each option with one garbage value (what CI runs)")
    ap.add_argument("--memory-gib", type=float, default=3.0,
                    help="address-space limit of each run (reading /dev/zero stops there), GiB (default 3)")
    ap.add_argument("--no-tile-fuzz", action="store_true", help="skip the fuzz of malformed tile programs")
    args = ap.parse_args(argv)
    values = None
    if args.values:
        names = args.values.split(",")
        unknown = [n for n in names if n not in GARBAGE]
        if unknown:
            ap.error(f"--values: unknown {unknown}; choose from {', '.join(GARBAGE)}")
        values = {n: GARBAGE[n] for n in names}
    doc = sweep(verbs_wanted=args.verbs.split(",") if args.verbs else None, values=values, timeout=args.timeout,
                sample=args.sample, memory_bytes=int(args.memory_gib * 2**30))
    doc["command"] = "python benchmarks/cli_sweep.py" + "".join(" " + shlex.quote(a) for a in (argv or sys.argv[1:]))
    if not args.no_tile_fuzz:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import tile_fuzz

        doc["tile_fuzz"] = tile_fuzz.fuzz()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")  # ASCII: argv holds undecodable bytes
    tile = doc.get("tile_fuzz") or {}
    print(f"{doc['verbs']} verbs, {doc['options']} options, {doc['runs']} runs: {doc['held']} held, "
          f"{doc['tracebacks']} tracebacks {doc['by_exception']}; problems {doc['problems']}"
          + (f"; tile fuzz: {tile.get('programs')} programs, {tile.get('tracebacks')} tracebacks" if tile else "")
          + f"; {doc['seconds']} s -> {args.out}")
    return 0 if not doc["problems"] and not tile.get("tracebacks") and not tile.get("unclean") else 1


if __name__ == "__main__":
    sys.exit(main())
