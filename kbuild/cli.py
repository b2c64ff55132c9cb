"""The ``kbuild`` command: one verb per subcommand, each in the module that owns the concern.

Verbs and their modules: ``compile`` → :mod:`kbuild.commands.compile`; ``explain`` →
:mod:`kbuild.commands.explain`; ``emit``, ``inspect``, ``verify-wheel``, ``lock`` →
:mod:`kbuild.commands.emit` etc. (build hooks); ``package-data`` →
:mod:`kbuild.commands.package_data` (Triton-JIT packages, :mod:`kbuild.runtime`); ``record`` →
:mod:`kbuild.commands.record` (:mod:`kbuild.record`); ``coverage`` → :mod:`kbuild.commands.coverage`
(:mod:`kbuild.runtime.coverage`);
``nvcc`` → :mod:`kbuild.nvcc.cli` (CUDA C++ launcher); ``cache`` → :mod:`kbuild.cache.cli`; ``sass`` → :mod:`kbuild.sass.cli`; ``bench`` →
:mod:`kbuild.bench.cli`. Each module exposes ``add_parser(subparsers)`` and sets
``func=handler`` where ``handler(args) -> int``. Building the parser imports no optional
package: ``tune``, ``prewarm``, ``bench`` and ``sass`` need the ``tune`` extra
(:data:`VERB_EXTRAS`, :mod:`kbuild.extras`) and, without it, stop before running with one line
naming ``pip install 'kbuild[tune]'`` (exit status 2).

Errors derived from :class:`kbuild.errors.KBuildError` print one ``error:`` line and exit with
their code (2 for bad input); tracebacks only with ``--debug``. An :class:`OSError` about a path the user
named on the command line (its ``filename`` is an argument's value, or lies under a directory given as one)
is bad input too: one line naming the argument, exit status 2 (:func:`path_argument_error`). Any other
exception is a bug in kbuild and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import sys
import traceback
from collections.abc import Sequence

from kbuild import __version__
from kbuild.errors import ExitCode, KBuildError
from kbuild.extras import require
from kbuild.settings.variables import env_setting

#: Modules that contribute subcommands, in the order they appear in ``--help``.
COMMAND_MODULES = [
    "kbuild.commands.compile",
    "kbuild.commands.explain",
    "kbuild.commands.tune",
    "kbuild.commands.prewarm",
    "kbuild.commands.emit",
    "kbuild.commands.inspect",
    "kbuild.commands.verify_wheel",
    "kbuild.commands.lock",
    "kbuild.commands.package_data",
    "kbuild.commands.record",
    "kbuild.commands.coverage",
    "kbuild.commands.tile",
    "kbuild.nvcc.cli",
    "kbuild.cache.cli",
    "kbuild.sass.cli",
    "kbuild.bench.cli",
]

#: Verbs that need an optional extra (:data:`kbuild.extras.EXTRAS`): the tuner, the benchmark suite (torch) and
#: the SASS engine (numpy). The other verbs run on the core dependencies alone.
VERB_EXTRAS = {"tune": "tune", "prewarm": "tune", "bench": "tune", "sass": "tune"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kbuild", description="Ahead-of-time compiled, SASS-tuned GPU kernels.")
    parser.add_argument("--version", action="version", version=f"kbuild {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        # Every verb ships with kbuild: a module that does not import is a packaging error, and it
        # must say so rather than make a verb silently vanish from --help.
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        debug = args.debug or bool(env_setting("debug"))  # --debug, else KBUILD_DEBUG
    except KBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, format="%(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        print("error: no command given; name one of the commands above", file=sys.stderr)
        return ExitCode.USAGE
    try:
        extra = VERB_EXTRAS.get(args.command)
        if extra is not None:
            require(extra, f"kbuild {args.command}")
        return int(args.func(args) or 0)
    except KBuildError as exc:
        if debug:
            traceback.print_exc()
        print(f"error: {_short_words(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130  # 128 + SIGINT, as shells report it
    except BrokenPipeError:
        # The reader of stdout went away (`kbuild cache ls --json | head`): stop quietly, as a tool killed by
        # SIGPIPE does, with no traceback; stdout goes to /dev/null so the interpreter's final flush is quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as shells report it
    except OSError as exc:
        message = path_argument_error(parser, args, exc)
        if message is None:
            raise  # not about a path the user gave: a bug, with its traceback
        if debug:
            traceback.print_exc()
        print(f"error: {message}", file=sys.stderr)
        return ExitCode.USAGE


def path_argument_error(parser: argparse.ArgumentParser, args: argparse.Namespace, exc: OSError) -> str | None:
    """``"<argument> <path>: <what is wrong>"`` when ``exc`` is about a path given on the command line, else None.

    The path is the exception's ``filename`` (or ``filename2``); it is about an argument when it is that
    argument's value, or lies under it and the value is not the argument's default (``--out DIR`` and
    ``DIR/k.cubin``; but ``--project .`` by default claims nothing)."""
    names = [os.fsdecode(n) for n in (exc.filename, exc.filename2) if isinstance(n, (str, bytes, os.PathLike))]
    if not names:
        return None
    for label, value, default in _path_arguments(parser, args):
        for name in names:
            if _same_or_under(name, value, under=value != default):
                where = "" if os.path.abspath(name) == os.path.abspath(value) else f" ({_short(name)})"
                return f"{label} {_short(value)}: {exc.strerror or exc}{where}"
    return None


def _path_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[tuple[str, str, object]]:
    """(label, value, default) of each string argument of the verb that ran, its sub-verbs followed."""
    out: list[tuple[str, str, object]] = []
    current: argparse.ArgumentParser | None = parser
    while current is not None:
        following: argparse.ArgumentParser | None = None
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                following = action.choices.get(getattr(args, action.dest, None) or "")
                continue
            value = getattr(args, action.dest, None)
            label = max(action.option_strings, key=len) if action.option_strings else (
                action.metavar if isinstance(action.metavar, str) else action.dest.upper())
            for v in value if isinstance(value, list) else [value]:
                if isinstance(v, (str, os.PathLike)) and os.fspath(v):
                    out.append((label, os.fspath(v), action.default))
        current = following
    return out


def _same_or_under(name: str, value: str, *, under: bool) -> bool:
    a, b = os.path.abspath(name), os.path.abspath(value)
    return a == b or (under and a.startswith(b.rstrip(os.sep) + os.sep))


def _short(path: str, limit: int = 160) -> str:
    """``path`` for a message: a name longer than ``limit`` is cut, with its length."""
    return path if len(path) <= limit else f"{path[:limit // 2]}… ({len(path):,} characters)"


def _short_words(message: str, limit: int = 300) -> str:
    """``message`` with every run of more than ``limit`` characters without a blank cut as :func:`_short` cuts
    a path (a 4,000-character file name given as an argument is echoed in the error once, shortened)."""
    return re.sub(rf"\S{{{limit + 1},}}", lambda m: _short(m.group(), limit), message)
