"""The ``kbuild`` command: one verb per subcommand, each in the module that owns the concern.

Verbs and their modules: ``compile`` → :mod:`kbuild.commands.compile`; ``explain`` →
:mod:`kbuild.commands.explain`; ``emit``, ``inspect``, ``verify-wheel``, ``lock`` →
:mod:`kbuild.commands.emit` etc. (build hooks); ``package-data`` →
:mod:`kbuild.commands.package_data` (Triton-JIT packages, :mod:`kbuild.runtime`);
``nvcc`` → :mod:`kbuild.nvcc.cli` (CUDA C++ launcher); ``cache`` → :mod:`kbuild.cache.cli`; ``sass`` → :mod:`kbuild.sass.cli`; ``bench`` →
:mod:`kbuild.bench.cli`. Each module exposes ``add_parser(subparsers)`` and sets
``func=handler`` where ``handler(args) -> int``. Building the parser imports no optional
package: ``tune``, ``prewarm``, ``bench`` and ``sass`` need the ``tune`` extra
(:data:`VERB_EXTRAS`, :mod:`kbuild.extras`) and, without it, stop before running with one line
naming ``pip install 'kbuild[tune]'`` (exit status 2).

Errors derived from :class:`kbuild.errors.KBuildError` print one ``error:`` line and exit with
their code (2 for bad input); tracebacks only with ``--debug``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import traceback
from collections.abc import Sequence

from kbuild import __version__
from kbuild.config import env_setting
from kbuild.errors import ExitCode, KBuildError
from kbuild.extras import require

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
        return ExitCode.USAGE
    try:
        extra = VERB_EXTRAS.get(args.command)
        if extra is not None:
            require(extra, f"kbuild {args.command}")
        return int(args.func(args) or 0)
    except KBuildError as exc:
        if debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130  # 128 + SIGINT, as shells report it
    except BrokenPipeError:
        # The reader of stdout went away (`kbuild cache ls --json | head`): stop quietly, as a tool killed by
        # SIGPIPE does, with no traceback; stdout goes to /dev/null so the interpreter's final flush is quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as shells report it
