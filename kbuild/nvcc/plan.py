"""nvcc's own compilation plan: ``nvcc ARGS --dryrun --keep --keep-dir DIR`` parsed into steps.

nvcc prints its plan on stderr, one line per action, each starting with ``#$ ``: first assignments of
its internal variables (``PATH=...``, ``CICC_PATH=...``), then the commands, which refer to those as
``$NAME``. With ``--keep --keep-dir DIR`` every intermediate file is named after the input inside
``DIR`` (no process ids), so the plan is the same from run to run and the files outlive each command.

:func:`parse_plan` turns the text into a :class:`Plan`; anything it cannot read with certainty
(a line without the prefix, anything the shell would expand or interpret (:mod:`kbuild.nvcc.shell`), no device
compile at all) raises :class:`Unsupported` with the reason, and the launcher then runs plain nvcc.

``--threads N`` is not passed to the dryrun (:func:`split_threads`): with it nvcc prints the same steps reordered,
each redirected to its own random temporary files; the launcher runs the plain plan's independent steps in
parallel itself (:mod:`kbuild.nvcc.schedule`).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .shell import ShellExpansion, expand

_PREFIX = "#$ "
_ASSIGN = re.compile(r"^([_A-Za-z][_A-Za-z0-9]*)=(.*)$")
_THREADED = re.compile(r">\s*\S*tmpxft\S*_stdout\s+2>")
_DEPS = re.compile(r"^-- Filter Dependencies -- > (.+)$")

#: The pseudo-command of nvcc's plan that writes the dependency file (``-MD``/``-MMD``).
DEPS_STEP = "@dependencies"


#: Arguments that change what nvcc does so much that its plan is not one compile (or that the launcher itself
#: sets): with any of them the launcher runs plain nvcc.
CONFLICTING_FLAGS = {
    "--dryrun": "the launcher runs nvcc's plan itself",
    "-dryrun": "the launcher runs nvcc's plan itself",
    "--keep": "the launcher keeps nvcc's intermediate files in its own directory",
    "-keep": "the launcher keeps nvcc's intermediate files in its own directory",
    "--keep-dir": "the launcher keeps nvcc's intermediate files in its own directory",
    "-keep-dir": "the launcher keeps nvcc's intermediate files in its own directory",
    "--save-temps": "the launcher keeps nvcc's intermediate files in its own directory",
    "-save-temps": "the launcher keeps nvcc's intermediate files in its own directory",
}


class Unsupported(Exception):
    """nvcc's invocation or plan is one the launcher does not handle; ``str()`` says why."""


@dataclass(frozen=True)
class Command:
    """One command of the plan, its ``$VARIABLES`` expanded."""

    argv: tuple[str, ...]
    line: int
    """The line number in nvcc's dryrun output (for messages)."""

    @property
    def tool(self) -> str:
        """The executable's file name: ``cicc``, ``ptxas``, ``gcc``, ``cudafe++``, ``fatbinary``, ..."""
        return Path(self.argv[0]).name


@dataclass(frozen=True)
class Plan:
    """nvcc's plan for one invocation."""

    env: dict[str, str]
    """nvcc's variable assignments, in order (``PATH``, ``LD_LIBRARY_PATH``, ``CICC_PATH``, ...)."""
    commands: list[Command] = field(default_factory=list)
    keep_dir: Path = Path(".")

    def tools(self) -> list[str]:
        return [c.tool for c in self.commands]

    def normalised(self) -> dict[str, object]:
        """The plan with its keep directory written as ``@TMP@``: the same for the same compile in every run (the
        direct mode's key, :mod:`kbuild.nvcc.direct`)."""
        tmp = str(self.keep_dir)
        return {"env": {k: v.replace(tmp, "@TMP@") for k, v in self.env.items()},
                "commands": [[a.replace(tmp, "@TMP@") for a in c.argv] for c in self.commands]}

    def response_files(self) -> list[str]:
        """The ``@file`` arguments of the plan's commands (``-Xcompiler @h.rsp``): files a tool reads its
        arguments from, which no dependency list names."""
        return list(dict.fromkeys(a[1:] for c in self.commands for a in c.argv[1:] if a.startswith("@") and a[1:]))


def conflicting_flag(args: Sequence[str]) -> str | None:
    """The first argument the launcher cannot honour and why (``"--keep: ..."``), or None."""
    for a in args:
        name = a.split("=", 1)[0]
        if name in CONFLICTING_FLAGS:
            return f"{name}: {CONFLICTING_FLAGS[name]}"
    return None


def split_threads(args: Sequence[str]) -> tuple[int, list[str]]:
    """nvcc's ``--threads N`` (``-t N``, ``-tN``, ``--threads=N``, ``-t=N``) and the arguments without it: how
    many steps may run at once (``0``: one per CPU, as nvcc reads it; absent: 1). A value that is not a number
    stays in the arguments, for nvcc to reject."""
    threads = 1
    rest: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        value: str | None = None
        width = 1
        if a in ("--threads", "-t") and i + 1 < len(args):
            value, width = args[i + 1], 2
        elif a.startswith(("--threads=", "-t=")):
            value = a.split("=", 1)[1]
        elif a.startswith("-t") and a[2:].isdigit():
            value = a[2:]
        if value is not None and value.isdigit():
            threads = int(value) or (os.cpu_count() or 1)
            i += width
            continue
        rest.append(a)
        i += 1
    return threads, rest


def dryrun(nvcc: str, args: Sequence[str], keep_dir: Path, *, cwd: Path,
           env: Mapping[str, str]) -> Plan:
    """Run ``nvcc ARGS --dryrun --keep --keep-dir KEEP_DIR`` and parse its plan. :class:`Unsupported` when nvcc
    rejects the arguments (plain nvcc then prints its own error) or the plan cannot be read."""
    cmd = [nvcc, *args, "--dryrun", "--keep", "--keep-dir", str(keep_dir)]
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=dict(env), capture_output=True, text=True, check=False)
    except OSError as exc:
        raise Unsupported(f"nvcc --dryrun could not start: {exc}") from None
    if proc.returncode != 0:
        first = next((ln for ln in proc.stderr.splitlines() if ln and not ln.startswith(_PREFIX)), "")
        raise Unsupported(f"nvcc --dryrun exited with status {proc.returncode}" + (f" ({first.strip()})" if first else ""))
    return parse_plan(proc.stderr, keep_dir=keep_dir)


def parse_plan(text: str, *, keep_dir: Path) -> Plan:
    """The plan in nvcc's dryrun ``text``. :class:`Unsupported` for anything not read with certainty."""
    env: dict[str, str] = {}
    commands: list[Command] = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        if not raw.startswith(_PREFIX):
            raise Unsupported(f"line {n} of nvcc's plan is not a step: {raw.strip()[:120]!r}")
        body = raw[len(_PREFIX):]
        deps = _DEPS.match(body)
        if deps:
            # nvcc writes the dependency file itself (no command of its own in the plan): the launcher asks
            # nvcc for it with -M (:func:`dependency_args`).
            commands.append(Command((DEPS_STEP, _strip_quotes(deps.group(1).strip())), n))
            continue
        m = _ASSIGN.match(body)
        if m and not commands:
            env[m.group(1)] = m.group(2)
            continue
        if _THREADED.search(body):
            raise Unsupported("nvcc's plan redirects each step to temporary files (--threads in an options file or "
                              "NVCC_PREPEND_FLAGS/NVCC_APPEND_FLAGS; the launcher reads it on the command line)")
        try:
            expanded = expand(body, env)
        except ShellExpansion as exc:
            raise Unsupported(f"nvcc runs its {_tool_name(body)} step through a shell, which would interpret {exc}; "
                              "what it makes of it cannot be keyed") from None
        try:
            argv = shlex.split(expanded)
        except ValueError as exc:
            raise Unsupported(f"line {n} of nvcc's plan cannot be split into arguments ({exc})") from None
        if not argv:
            continue
        commands.append(Command(tuple(argv), n))
    if not any(c.tool == "cicc" for c in commands):
        raise Unsupported("nvcc's plan compiles no device code (no cicc step)")
    return Plan(env=env, commands=commands, keep_dir=keep_dir)


def _tool_name(body: str) -> str:
    first = body.split(None, 1)[0] if body.split() else ""
    return Path(first.strip('"').replace("$CICC_PATH/", "")).name


def _strip_quotes(text: str) -> str:
    parts = shlex.split(text)
    if len(parts) != 1:
        raise Unsupported(f"nvcc's dependency file name {text!r} is not one path")
    return parts[0]


def dependency_target(args: Sequence[str]) -> str:
    """The target of the dependency file a compile with ``-MD`` writes: ``-MT``'s, else the ``-o`` output as written
    (nvcc's own rule). :class:`Unsupported` for ``-MMD`` (nvcc leaves system headers out; the launcher lists every
    file) and with neither ``-MT`` nor ``-o``."""
    for a in args:
        if a in ("-MMD", "--generate-nonsystem-dependencies-with-compile"):
            raise Unsupported(f"{a}: the launcher writes dependency files with every header (-MD)")
    for i, a in enumerate(args):
        if a in ("-MT", "--dependency-target-name") and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(("-MT=", "--dependency-target-name=")):
            return a.split("=", 1)[1]
    for i, a in enumerate(args):  # nvcc names the object as written after -o (torch's BuildExtension relies on it)
        if a in ("-o", "--output-file") and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(("-o=", "--output-file=")):
            return a.split("=", 1)[1]
    raise Unsupported("a dependency file without -MT or -o: the target nvcc would name in it is not certain")


def is_preprocess(argv: Sequence[str]) -> bool:
    """A host preprocessor command of the plan (``gcc -E ... -o X.ii``)."""
    return "-E" in argv and any(a == "-o" and i + 1 < len(argv) and argv[i + 1].endswith(".ii")
                                for i, a in enumerate(argv))


_GNU_DRIVER = re.compile(r"^(?:.*-)?(?:gcc|g\+\+|cc|c\+\+|clang|clang\+\+)(?:-\d+(?:\.\d+)*)?$")


def is_host_compile(argv: Sequence[str]) -> bool:
    """The plan's host compile by a gcc- or clang-style driver (``g++ -c ... X.cudafe1.cpp -o X.o``): it takes
    ``-fdebug-prefix-map`` (the launcher maps its temporary directory, whose name is random, out of ``-g`` debug
    information)."""
    return "-c" in argv and "-E" not in argv and bool(_GNU_DRIVER.match(Path(argv[0]).name))


def child_env(plan: Plan, base: Mapping[str, str]) -> dict[str, str]:
    """The environment of the plan's commands: ``base`` with nvcc's assignments on top (as nvcc's own shell
    would export them; ``PATH`` names the toolkit's ``bin`` and ``nvvm/bin`` first)."""
    out = dict(base)
    out.update(plan.env)
    return out


def which(tool: str, env: Mapping[str, str], cwd: Path) -> str:
    """An executable of the plan as a path: as written when it has a ``/``, else looked up on the plan's
    ``PATH``; :class:`Unsupported` when it is not found."""
    if os.sep in tool:
        return tool if os.path.isabs(tool) else str(cwd / tool)
    import shutil

    found = shutil.which(tool, path=env.get("PATH"))
    if found is None:
        raise Unsupported(f"the plan's tool {tool!r} is not on nvcc's PATH")
    return found


__all__ = ["CONFLICTING_FLAGS", "DEPS_STEP", "Command", "Plan", "Unsupported", "child_env", "conflicting_flag", "dependency_target", "dryrun", "is_host_compile", "is_preprocess",
           "parse_plan", "split_threads", "which"]
